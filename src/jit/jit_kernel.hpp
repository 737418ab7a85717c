// JitKernel: the base of every generator.
//
// Construction cannot fail; create() runs generate(), finalises the code and
// flips the memory from writable to executable (never both at once: AutoGrow
// + readyRE). Xbyak errors become convgrad::error naming the kernel. After
// create() the kernel is registered for CONVGRAD_JIT_DUMP (bytes to
// <name>.bin) and CONVGRAD_PERF_MAP (/tmp/perf-<pid>.map for `perf report`).
#pragma once

#include <string>
#include <xbyak/xbyak.h>

namespace convgrad::detail {

class JitKernel : public Xbyak::CodeGenerator {
public:
    explicit JitKernel(std::string name);
    ~JitKernel() override = default;
    JitKernel(const JitKernel&) = delete;
    JitKernel& operator=(const JitKernel&) = delete;

    // Emits and finalises the code. Throws convgrad::error on failure.
    void create();
    const std::string& name() const { return name_; }

    template <typename Fn>
    Fn entry() const {
        return reinterpret_cast<Fn>(const_cast<uint8_t*>(getCode()));
    }

protected:
    virtual void generate() = 0;

    // System V prologue/epilogue: saves rbp (frame pointer, so profilers can
    // unwind through JIT frames) and the callee-saved registers the kernel
    // uses (rbx, r12-r15 as requested).
    void preamble(int saved_gprs = 5);
    void postamble();

private:
    std::string name_;
    int saved_gprs_ = 0;
};

}  // namespace convgrad::detail
