// Bytes placed against an inaccessible page, so that a read or write past
// their end (or before their start) faults: convgrad-sweep's --guard and the
// tests' guarded runs. Header-only, so the tests use it with or without the
// CLI library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

namespace convgrad::cli {

// Where a buffer's bytes sit against an inaccessible page (--guard): none
// (64-byte aligned heap storage), end (the last byte just before the page:
// a read or write past the end faults) or begin (the first byte just after
// it: one before the start faults).
enum class guard_side { none, end, begin };

// n bytes of fresh pages (zero-filled) with a PROT_NONE page right after
// their last byte (end) or right before their first (begin). Throws
// std::bad_alloc when the mapping fails, std::runtime_error when the guard
// page cannot be protected, std::invalid_argument for guard_side::none.
class guarded_pages {
public:
    guarded_pages(size_t n, guard_side side) {
        if (side == guard_side::none) throw std::invalid_argument("guarded_pages: no side to guard");
        const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
        const size_t data_pages = (n + page - 1) / page * page;
        map_bytes_ = data_pages + page;
        void* map = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED) throw std::bad_alloc();
        map_ = static_cast<uint8_t*>(map);
        uint8_t* fence = side == guard_side::end ? map_ + data_pages : map_;
        if (::mprotect(fence, page, PROT_NONE) != 0) {
            ::munmap(map_, map_bytes_);
            throw std::runtime_error("guarded_pages: mprotect failed");
        }
        data_ = side == guard_side::end ? fence - n : map_ + page;
    }
    ~guarded_pages() {
        if (map_) ::munmap(map_, map_bytes_);
    }
    guarded_pages(guarded_pages&& o) noexcept
        : map_(std::exchange(o.map_, nullptr)), map_bytes_(o.map_bytes_), data_(std::exchange(o.data_, nullptr)) {}
    guarded_pages& operator=(guarded_pages&&) = delete;
    guarded_pages(const guarded_pages&) = delete;
    guarded_pages& operator=(const guarded_pages&) = delete;

    uint8_t* data() const { return data_; }

private:
    uint8_t* map_ = nullptr;  // the data pages and the guard page
    size_t map_bytes_ = 0;
    uint8_t* data_ = nullptr;
};

}  // namespace convgrad::cli
