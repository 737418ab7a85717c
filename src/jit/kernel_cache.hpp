// A process-wide cache of generated kernels keyed by a KernelDesc: a
// trivially copyable struct holding only what changes the emitted bytes
// (shape values that do not are runtime arguments). Thread-safe; a kernel is
// generated outside the lock, concurrent requests for one desc wait for the
// same build, and a failed build is evicted so the next request retries.
#pragma once

#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

namespace convgrad::detail {

template <typename Desc, typename Kernel>
class KernelCache {
    static_assert(std::is_trivially_copyable_v<Desc>, "KernelDesc must be trivially copyable");

public:
    using Ptr = std::shared_ptr<const Kernel>;

    // Returns the kernel for `desc`, building it with `build(desc)` on a miss.
    // *hit (if given) tells whether it was cached. Rethrows a failed build.
    Ptr get(const Desc& desc, const std::function<Ptr(const Desc&)>& build, bool* hit = nullptr) {
        const std::string key(reinterpret_cast<const char*>(&desc), sizeof(Desc));
        std::promise<Ptr> promise;
        std::shared_future<Ptr> future;
        bool owner = false;
        {
            const std::lock_guard<std::mutex> lock(mu_);
            auto it = map_.find(key);
            if (it == map_.end()) {
                future = promise.get_future().share();
                map_.emplace(key, future);
                owner = true;
            } else {
                future = it->second;
            }
        }
        if (hit) *hit = !owner;
        if (owner) {
            try {
                promise.set_value(build(desc));
            } catch (...) {
                promise.set_exception(std::current_exception());
                const std::lock_guard<std::mutex> lock(mu_);
                map_.erase(key);
            }
        }
        return future.get();
    }

    size_t size() const {
        const std::lock_guard<std::mutex> lock(mu_);
        return map_.size();
    }

private:
    mutable std::mutex mu_;
    std::unordered_map<std::string, std::shared_future<Ptr>> map_;
};

}  // namespace convgrad::detail
