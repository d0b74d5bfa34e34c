// assert.h for the CPU emulator: a failed device-side assert reports its thread, block and line
// (KernelAssertionError) instead of aborting. No include guard, like the C header: each
// inclusion re-reads NDEBUG.
#include "emu_abi.hpp"

#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : emu_assert_fail(#e, __FILE__, __LINE__))
#endif
