#include "ops/scratch.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace convgrad::detail {
namespace {

char* alloc_bytes(int64_t bytes) {
    const size_t size = (static_cast<size_t>(bytes) + 2 * 64 - 1) / 64 * 64;  // + a vector of slack
    void* p = std::aligned_alloc(64, size);
    if (!p) throw std::bad_alloc();
    return static_cast<char*>(p);
}

struct Slot {
    char* buf = nullptr;
    int64_t bytes = 0;
    bool leased = false;
};

// One thread's kept buffers. Its own leases and release_scratch() (from any
// thread) take the mutex; it is uncontended but for the latter.
struct ThreadScratch {
    std::mutex m;
    std::array<Slot, static_cast<size_t>(Scratch::count)> slots;
    ~ThreadScratch() {
        for (Slot& s : slots) std::free(s.buf);
    }
};

struct Registry {
    std::mutex m;
    std::vector<std::weak_ptr<ThreadScratch>> threads;
};
Registry& registry() {
    static Registry* r = new Registry;  // never destroyed: threads may outlive static destructors
    return *r;
}

ThreadScratch& this_thread() {
    thread_local const std::shared_ptr<ThreadScratch> mine = [] {
        auto t = std::make_shared<ThreadScratch>();
        Registry& r = registry();
        const std::lock_guard<std::mutex> lock(r.m);
        r.threads.erase(std::remove_if(r.threads.begin(), r.threads.end(),
                                       [](const std::weak_ptr<ThreadScratch>& w) { return w.expired(); }),
                        r.threads.end());
        r.threads.push_back(t);
        return t;
    }();
    return *mine;
}

// Calls fn(ThreadScratch&) under its lock for every live thread's buffers.
template <typename Fn>
void for_each_kept(Fn&& fn) {
    std::vector<std::shared_ptr<ThreadScratch>> live;
    {
        Registry& r = registry();
        const std::lock_guard<std::mutex> lock(r.m);
        for (const auto& w : r.threads)
            if (auto t = w.lock()) live.push_back(std::move(t));
    }
    for (const auto& t : live) {
        const std::lock_guard<std::mutex> lock(t->m);
        fn(*t);
    }
}

}  // namespace

ScratchLease::ScratchLease(Scratch use, int64_t bytes) {
    if (bytes <= 0) return;
    if (bytes <= kMaxKeptBytes) {
        ThreadScratch& t = this_thread();
        const std::lock_guard<std::mutex> lock(t.m);
        Slot& s = t.slots[static_cast<size_t>(use)];
        if (!s.leased) {
            if (s.bytes < bytes) {
                std::free(s.buf);
                s.buf = nullptr;
                s.bytes = 0;
                s.buf = alloc_bytes(bytes);
                s.bytes = bytes;
            }
            s.leased = true;
            ptr_ = s.buf;
            slot_ = &s;
            owner_ = &t;
            return;
        }
    }
    ptr_ = alloc_bytes(bytes);
}

ScratchLease::ScratchLease(ScratchLease&& o) noexcept : ptr_(o.ptr_), slot_(o.slot_), owner_(o.owner_) {
    o.ptr_ = nullptr;
    o.slot_ = o.owner_ = nullptr;
}

ScratchLease& ScratchLease::operator=(ScratchLease&& o) noexcept {
    if (this != &o) {
        reset();
        ptr_ = o.ptr_;
        slot_ = o.slot_;
        owner_ = o.owner_;
        o.ptr_ = nullptr;
        o.slot_ = o.owner_ = nullptr;
    }
    return *this;
}

void ScratchLease::reset() {
    if (slot_) {
        const std::lock_guard<std::mutex> lock(static_cast<ThreadScratch*>(owner_)->m);
        static_cast<Slot*>(slot_)->leased = false;
    } else {
        std::free(ptr_);
    }
    ptr_ = nullptr;
    slot_ = owner_ = nullptr;
}

size_t release_scratch() {
    size_t freed = 0;
    for_each_kept([&](ThreadScratch& t) {
        for (Slot& s : t.slots) {
            if (s.leased || !s.buf) continue;
            freed += static_cast<size_t>(s.bytes);
            std::free(s.buf);
            s = Slot{};
        }
    });
    return freed;
}

size_t kept_scratch_bytes() {
    size_t kept = 0;
    for_each_kept([&](ThreadScratch& t) {
        for (const Slot& s : t.slots) kept += static_cast<size_t>(s.bytes);
    });
    return kept;
}

}  // namespace convgrad::detail
