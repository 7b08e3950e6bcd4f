/* probe (bench/probes/omp_offload_stream.c): register LLVM's NVPTX target in libLLVM before libomptarget's JIT
 * looks for it (Debian 12's libomptarget 19 finds none).  gcc -O2 -shared -fPIC omp_offload_jitinit.c -lLLVM-19 */
void LLVMInitializeNVPTXTargetInfo(void);
void LLVMInitializeNVPTXTarget(void);
void LLVMInitializeNVPTXTargetMC(void);
void LLVMInitializeNVPTXAsmPrinter(void);
__attribute__((constructor)) static void init(void)
{
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
}
