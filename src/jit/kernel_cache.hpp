// A process-wide cache of generated kernels keyed by a KernelDesc: a
// trivially copyable struct holding only what changes the emitted bytes
// (shape values that do not are runtime arguments). Thread-safe; a kernel is
// generated outside the lock, concurrent requests for one desc wait for the
// same build, and a failed build is evicted so the next request retries.
// Every cache registers itself, so clear_kernel_caches() can empty them all
// (convgrad::clear_kernel_cache).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace convgrad::detail {

class KernelCacheBase {
public:
    // Drops every entry; returns how many there were. Kernels in use stay
    // alive through their owners' shared pointers.
    virtual size_t clear() = 0;

protected:
    // The derived cache registers itself once fully constructed and
    // unregisters before its members go: a clear_kernel_caches() racing with
    // the first use of a function-local cache (or with exit) must never call
    // clear() on a half-built or half-destroyed object.
    void register_cache();
    void unregister_cache();
    ~KernelCacheBase() = default;
};

// Empties every kernel cache of the process; returns the entries dropped.
size_t clear_kernel_caches();

template <typename Desc, typename Kernel>
class KernelCache final : public KernelCacheBase {
    static_assert(std::is_trivially_copyable_v<Desc>, "KernelDesc must be trivially copyable");

public:
    using Ptr = std::shared_ptr<const Kernel>;

    KernelCache() { register_cache(); }
    ~KernelCache() { unregister_cache(); }
    KernelCache(const KernelCache&) = delete;
    KernelCache& operator=(const KernelCache&) = delete;

    // Returns the kernel for `desc`, building it with `build(desc)` on a miss.
    // *hit (if given) tells whether it was cached. Rethrows a failed build.
    Ptr get(const Desc& desc, const std::function<Ptr(const Desc&)>& build, bool* hit = nullptr) {
        const std::string key(reinterpret_cast<const char*>(&desc), sizeof(Desc));
        std::promise<Ptr> promise;
        std::shared_future<Ptr> future;
        bool owner = false;
        uint64_t id = 0;
        {
            const std::lock_guard<std::mutex> lock(mu_);
            auto it = map_.find(key);
            if (it == map_.end()) {
                future = promise.get_future().share();
                id = ++builds_;
                map_.emplace(key, Entry{future, id});
                owner = true;
            } else {
                future = it->second.kernel;
            }
        }
        if (hit) *hit = !owner;
        if (owner) {
            try {
                promise.set_value(build(desc));
            } catch (...) {
                promise.set_exception(std::current_exception());
                const std::lock_guard<std::mutex> lock(mu_);
                auto it = map_.find(key);  // still this build's entry (not one made after a clear)
                if (it != map_.end() && it->second.id == id) map_.erase(it);
            }
        }
        return future.get();
    }

    size_t size() const {
        const std::lock_guard<std::mutex> lock(mu_);
        return map_.size();
    }

    // A build in flight finishes for the requests already waiting on it;
    // later requests build the kernel again.
    size_t clear() override {
        const std::lock_guard<std::mutex> lock(mu_);
        const size_t n = map_.size();
        map_.clear();
        return n;
    }

private:
    struct Entry {
        std::shared_future<Ptr> kernel;
        uint64_t id;  // which get() made it
    };
    mutable std::mutex mu_;
    std::unordered_map<std::string, Entry> map_;
    uint64_t builds_ = 0;
};

// The kernel for `desc` from `cache`, built on a miss as Kernel(desc), then
// create() (generate and seal) and finalize() (take its entry point).
template <typename Kernel, typename Desc>
std::shared_ptr<const Kernel> get_finalized(KernelCache<Desc, Kernel>& cache, const Desc& desc, bool* hit) {
    return cache.get(
            desc,
            [](const Desc& d) {
                auto k = std::make_shared<Kernel>(d);
                k->create();
                k->finalize();
                return std::shared_ptr<const Kernel>(std::move(k));
            },
            hit);
}

}  // namespace convgrad::detail
