/* nvidia.cl -- NVIDIA's own OpenCL compiler: the hooks of cl/q1_0.cl written in inline PTX. */

/*
 * The program for a card of NVIDIA's driver is this file, then cl/q1_0*.cl
 * (src/card/program.c chooses it at open; a compiler that refuses it gets
 * cl/q1_0*.cl alone, whose defaults give the same bits).  Each hook was
 * measured on the H200 (doc/PERFORMANCE.md, "NVIDIA's build"):
 *   BML_BYTE_PERMUTE, bml_byte_into   the table kernels' lookups of a full
 *                                     tile by PTX's byte permute (prmt)
 *   BML_SYS_FENCE, BML_SPIN_*         q1_0_token's fences of the system's
 *                                     scope (membar.sys: the global fence is
 *                                     the card's scope alone) and its waits
 *                                     timed by the card's clock (%globaltimer)
 *   BML_L2_PREFETCH                   q1_0_token's next group asked into the
 *                                     L2 while it waits (prefetch.global.L2)
 *   BML_BULK_COPY, bml_bulk_*         with -DBML_NVIDIA_TMA=1 (compute
 *                                     capability 9.0 and later): the table's
 *                                     sources copied into local memory by the
 *                                     TMA (cp.async.bulk, completion counted
 *                                     in bytes by an mbarrier)
 * Local pointers are 32-bit offsets in the shared window on this driver, as
 * the PTX instructions take them.
 */

/* Byte m of y into the low byte of h (whose low byte is 0). */
#define BML_BYTE_PERMUTE 1
static inline uint bml_byte_into(uint y, uint h, uint m) {
  uint r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(y), "r"(h), "r"(0x7650u | m));
  return r;
}

#define BML_SYS_FENCE() asm volatile("membar.sys;" ::: "memory")
/* The line of global memory at p into L2 (q1_0_token's next group). */
#define BML_L2_PREFETCH(p) asm volatile("prefetch.global.L2 [%0];" ::"l"((ulong)(size_t)(p)))
static inline ulong bml_clock_ns(void) {
  ulong t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
/* A wait gives up after `limit` microseconds of the card's clock. */
#define BML_SPIN_START(limit) const ulong spin_end_ = bml_clock_ns() + (ulong)(limit) * 1000ul
#define BML_SPIN_OVER(n, limit) (((n) & 63u) == 0u && bml_clock_ns() > spin_end_)

#if defined(BML_NVIDIA_TMA) && BML_NVIDIA_TMA
#define BML_BULK_COPY 1
#define BML_SH(p) ((uint)(size_t)(p))
/* Two mbarriers at bars, each expecting one arrival a phase. */
static inline void bml_bulk_init(__local ulong *bars) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(BML_SH(bars)) : "memory");
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(BML_SH(bars + 1)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* A phase of bar that completes once `bytes` have come: the fence orders the
 * work-group's reads of the slot (behind the barrier just passed) before
 * the TMA's writes. */
static inline void bml_bulk_start(__local ulong *bar, uint bytes) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(BML_SH(bar)), "r"(bytes) : "memory");
}
static inline void bml_bulk_copy(__local void *dst, __global const void *src, uint bytes, __local ulong *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   BML_SH(dst)),
               "l"((ulong)(size_t)src), "r"(bytes), "r"(BML_SH(bar))
               : "memory");
}
/* Waits (each work-item) for the phase of bar of this parity to complete. */
static inline void bml_bulk_wait(__local ulong *bar, uint parity) {
  uint ok = 0;
  while (!ok)
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(ok)
                 : "r"(BML_SH(bar)), "r"(parity)
                 : "memory");
}
#endif
