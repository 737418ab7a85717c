// Process-wide caches of plans. Creating an op whose Problem (every field),
// ISA and thread count equal an earlier op's reuses that op's plan instead
// of searching for it again: frameworks that create their ops anew on every
// step (one op per call, as eager-mode training does) pay the search once
// per layer. A plan is plain data, a pure function of that key; the
// kernels it names come from the kernel caches as before.
//
// Bounded: the least recently used plan goes once a cache holds
// CONVGRAD_PLAN_CACHE_CAPACITY plans (default kDefaultPlanCacheCapacity; 0
// turns the caches off). Thread-safe. convgrad::clear_kernel_cache() empties
// them too, so that op creation can be timed from cold.
#pragma once

#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "jit/isa.hpp"
#include "ops/plan_data.hpp"
#include "ops/plan_weights.hpp"
#include "ops/problem.hpp"

namespace convgrad::detail {

inline constexpr size_t kDefaultPlanCacheCapacity = 1024;

// The cache key of (p, isa, threads): every field of p, in bytes.
std::string plan_key(const Problem& p, Isa isa, int threads);

template <typename Plan>
class PlanCache {
public:
    explicit PlanCache(size_t capacity) : capacity_(capacity) {}
    PlanCache(const PlanCache&) = delete;
    PlanCache& operator=(const PlanCache&) = delete;

    // *plan := the plan cached under `key` (now the most recently used);
    // false when there is none.
    bool find(const std::string& key, Plan* plan) {
        const std::lock_guard<std::mutex> lock(mu_);
        const auto it = index_.find(key);
        if (it == index_.end()) return false;
        lru_.splice(lru_.begin(), lru_, it->second);
        *plan = it->second->second;
        return true;
    }
    // Caches `plan` under `key`, dropping the least recently used plan
    // beyond the capacity.
    void insert(const std::string& key, const Plan& plan) {
        if (capacity_ == 0) return;
        const std::lock_guard<std::mutex> lock(mu_);
        if (const auto it = index_.find(key); it != index_.end()) {  // another thread planned it too
            lru_.splice(lru_.begin(), lru_, it->second);
            return;
        }
        lru_.emplace_front(key, plan);
        index_.emplace(std::string_view(lru_.front().first), lru_.begin());
        if (lru_.size() > capacity_) {
            index_.erase(std::string_view(lru_.back().first));
            lru_.pop_back();
        }
    }
    size_t clear() {
        const std::lock_guard<std::mutex> lock(mu_);
        const size_t n = lru_.size();
        index_.clear();
        lru_.clear();
        return n;
    }
    size_t size() const {
        const std::lock_guard<std::mutex> lock(mu_);
        return lru_.size();
    }

private:
    using Entry = std::pair<std::string, Plan>;
    const size_t capacity_;
    mutable std::mutex mu_;
    std::list<Entry> lru_;  // most recently used first
    // Keys view the strings of their entries (list nodes never move).
    std::unordered_map<std::string_view, typename std::list<Entry>::iterator> index_;
};

// The caches of weight-gradient and data-gradient plans (never destroyed, so
// ops created during static destruction still find them).
PlanCache<WeightsPlan>& weights_plan_cache();
PlanCache<DataPlan>& data_plan_cache();
// Empties both; returns the plans dropped.
size_t clear_plan_caches();

// CONVGRAD_VERBOSE: a "convgrad,plan_cache,<family>,hit|miss" line.
void log_plan_lookup(const char* family, bool hit);

// *plan := the plan of (p, isa, threads): cached, or made by make(plan) and
// cached when that returns true (false: the implementation declines the
// problem; nothing is cached and false is returned).
template <typename Plan, typename Make>
bool find_or_make_plan(PlanCache<Plan>& cache, const char* family, const Problem& p, Isa isa, int threads, Plan* plan,
                       Make&& make) {
    const std::string key = plan_key(p, isa, threads);
    const bool hit = cache.find(key, plan);
    log_plan_lookup(family, hit);
    if (hit) return true;
    if (!make(plan)) return false;
    cache.insert(key, *plan);
    return true;
}

}  // namespace convgrad::detail
