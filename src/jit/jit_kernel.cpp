#include "jit/jit_kernel.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <vector>

#include "convgrad/convgrad.hpp"
#include "jit/kernel_cache.hpp"

namespace convgrad::detail {
namespace {

bool env_on(const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::string(v) != "0";
}

// CONVGRAD_PERF_MAP: the map file cannot say that a kernel's code is gone,
// and perf names an address after the first entry that covers it. A kernel
// freed (the bf16 probe, a cache cleared or evicted) and its pages reused
// by another made perf report the second under the first's name. While the
// map is written, code that has an entry is never freed: an address names
// one kernel for the life of the process (the memory of freed kernels is
// the price, in a profiling run only). Buffers that never got an entry
// (AutoGrow's outgrown ones) are freed as usual.
class PerfMapAllocator : public Xbyak::Allocator {
public:
    void free(uint8_t* p) override {
        {
            const std::lock_guard<std::mutex> lock(mu_);
            if (std::find(kept_.begin(), kept_.end(), p) != kept_.end()) return;
        }
        Xbyak::Allocator::free(p);
    }
    void keep(const uint8_t* p) {
        const std::lock_guard<std::mutex> lock(mu_);
        kept_.push_back(p);
    }

private:
    std::mutex mu_;
    std::vector<const uint8_t*> kept_;
};

// Never destroyed: kernels in static storage may outlive any static here.
PerfMapAllocator* perf_map_allocator() {
    static PerfMapAllocator* a = env_on("CONVGRAD_PERF_MAP") ? new PerfMapAllocator : nullptr;
    return a;
}

void register_kernel(const std::string& name, const uint8_t* code, size_t size) {
    if (env_on("CONVGRAD_JIT_DUMP")) {
        std::ofstream(name + ".bin", std::ios::binary)
                .write(reinterpret_cast<const char*>(code), static_cast<std::streamsize>(size));
    }
    if (PerfMapAllocator* keep = perf_map_allocator()) {
        keep->keep(code);
        static std::mutex mu;
        const std::lock_guard<std::mutex> lock(mu);
        const std::string path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
        if (FILE* f = std::fopen(path.c_str(), "a")) {
            std::fprintf(f, "%lx %zx convgrad:%s\n", reinterpret_cast<unsigned long>(code), size,
                         name.c_str());
            std::fclose(f);
        }
    }
}

struct CacheRegistry {
    std::mutex mu;
    std::vector<KernelCacheBase*> caches;
};

// Constructed by the first cache's registration, so it outlives every cache
// (function-local statics are destroyed in reverse order of construction).
CacheRegistry& registry() {
    static CacheRegistry r;
    return r;
}

// rbx, r12..r15 in push order.
const Xbyak::Reg64 kSaved[] = {Xbyak::util::rbx, Xbyak::util::r12, Xbyak::util::r13,
                               Xbyak::util::r14, Xbyak::util::r15};

}  // namespace

void KernelCacheBase::register_cache() {
    CacheRegistry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mu);
    r.caches.push_back(this);
}

void KernelCacheBase::unregister_cache() {
    CacheRegistry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mu);
    r.caches.erase(std::remove(r.caches.begin(), r.caches.end(), this), r.caches.end());
}

size_t clear_kernel_caches() {
    CacheRegistry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mu);
    size_t n = 0;
    for (KernelCacheBase* c : r.caches) n += c->clear();
    return n;
}

JitKernel::JitKernel(std::string name)
    : Xbyak::CodeGenerator(4096, Xbyak::AutoGrow, perf_map_allocator()), name_(std::move(name)) {
    setDefaultJmpNEAR(true);
}

void JitKernel::create() {
    try {
        generate();
        if (hasUndefinedLabel()) throw error("JIT kernel " + name_ + ": undefined label");
        readyRE();
    } catch (const Xbyak::Error& e) {
        throw error("JIT kernel " + name_ + ": code generation failed: " + e.what());
    }
    register_kernel(name_, getCode(), getSize());
}

void JitKernel::preamble(int saved_gprs) {
    saved_gprs_ = saved_gprs;
    push(rbp);
    mov(rbp, rsp);
    for (int i = 0; i < saved_gprs_; ++i) push(kSaved[i]);
}

void JitKernel::postamble() {
    for (int i = saved_gprs_ - 1; i >= 0; --i) pop(kSaved[i]);
    pop(rbp);
    vzeroupper();
    ret();
}

}  // namespace convgrad::detail
