#include "ops/plan_cache.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "ops/executor.hpp"

namespace convgrad::detail {
namespace {

// A field added to Problem changes its size: it then belongs in plan_key
// too (or the cache would hand one problem's plan to another).
static_assert(sizeof(Problem) == 376 + sizeof(dims), "a new Problem field belongs in plan_key()");

class KeyWriter {
public:
    explicit KeyWriter(std::string& out) : out_(out) {}
    template <typename T>
    void put(T v) {
        static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
        const int64_t x = static_cast<int64_t>(v);
        out_.append(reinterpret_cast<const char*>(&x), sizeof x);
    }
    template <typename T, size_t N>
    void put(const std::array<T, N>& a) {
        for (const T& v : a) put(v);
    }

private:
    std::string& out_;
};

size_t capacity_from_env() {
    const char* v = std::getenv("CONVGRAD_PLAN_CACHE_CAPACITY");
    if (!v || !*v) return kDefaultPlanCacheCapacity;
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    return *end == '\0' && n >= 0 ? static_cast<size_t>(n) : kDefaultPlanCacheCapacity;
}

}  // namespace

std::string plan_key(const Problem& p, Isa isa, int threads) {
    std::string key;
    key.reserve(64 * sizeof(int64_t) + p.output_dims.size() * sizeof(int64_t));
    KeyWriter w(key);
    w.put(isa);
    w.put(threads);
    w.put(p.kind);
    w.put(p.dt);
    w.put(p.alg);
    w.put(p.nsp);
    w.put(p.mb);
    w.put(p.g);
    w.put(p.icg);
    w.put(p.ocg);
    for (const auto* a : {&p.in, &p.out, &p.k, &p.stride, &p.dil, &p.pad_begin, &p.pad_end}) w.put(*a);
    w.put(p.nxc);
    w.put(p.wlayout);
    for (const DataStrides* s : {&p.src_str, &p.dst_str}) {
        w.put(s->n);
        w.put(s->c);
        w.put(s->sp);
    }
    w.put(p.wei_str.o);
    w.put(p.wei_str.i);
    w.put(p.wei_str.k);
    w.put(p.swap_inputs);
    w.put(p.input0_elems);
    w.put(p.input1_elems);
    w.put(p.output_elems);
    w.put(p.output_dims.size());
    for (const int64_t d : p.output_dims) w.put(d);
    return key;
}

PlanCache<WeightsPlan>& weights_plan_cache() {
    static auto* cache = new PlanCache<WeightsPlan>(capacity_from_env());
    return *cache;
}

PlanCache<DataPlan>& data_plan_cache() {
    static auto* cache = new PlanCache<DataPlan>(capacity_from_env());
    return *cache;
}

size_t clear_plan_caches() { return weights_plan_cache().clear() + data_plan_cache().clear(); }

void log_plan_lookup(const char* family, bool hit) {
    if (verbose_log()) std::fprintf(stderr, "convgrad,plan_cache,%s,%s\n", family, hit ? "hit" : "miss");
}

}  // namespace convgrad::detail
