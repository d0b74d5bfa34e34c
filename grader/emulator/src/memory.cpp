// memory.cpp: a block's shared memory (static and dynamic), where an address lies, alignment.
#include "launcher.hpp"

namespace launcher {

void poison_shared(Worker* w) {
    if (w->tls_len) memset(w->tls_lo, 0xff, w->tls_len);
    if (w->dyn_len) memset(emu_ctx.dyn_smem, 0xff, w->dyn_len);
}

void bind_tls(Worker* w, int lib) {
    if (w->tls_lib == lib) return;
    Library& L = g_libs[lib];
    L.tls_touch();
    void* block = nullptr;
    size_t modid = 0;
    dlinfo(L.handle, RTLD_DI_TLS_DATA, &block);
    dlinfo(L.handle, RTLD_DI_TLS_MODID, &modid);
    struct Find {
        size_t modid;
        size_t size;
    } find{modid, 0};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
            auto* fd = static_cast<Find*>(data);
            if (info->dlpi_tls_modid != fd->modid) return 0;
            for (int i = 0; i < info->dlpi_phnum; ++i)
                if (info->dlpi_phdr[i].p_type == PT_TLS) fd->size = info->dlpi_phdr[i].p_memsz;
            return 1;
        },
        &find);
    w->tls_lib = lib;
    w->tls_lo = static_cast<unsigned char*>(block);
    w->tls_len = block ? find.size : 0;
}

void bind_dynamic_shared(Worker* w, size_t bytes) {
    size_t span = (bytes + kPage - 1) / kPage * kPage;
    if (w->dyn_map_len < span + kPage) {
        if (w->dyn_map) munmap(w->dyn_map, w->dyn_map_len);
        w->dyn_map_len = span + kPage;
        void* p = mmap(nullptr, w->dyn_map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) report(kOther, -1, "cannot allocate %zu bytes of dynamic shared memory", bytes);
        w->dyn_map = static_cast<unsigned char*>(p);
    }
    mprotect(w->dyn_map, w->dyn_map_len, PROT_READ | PROT_WRITE);
    mprotect(w->dyn_map + span, w->dyn_map_len - span, PROT_NONE);
    // The end of the array touches the guard page; keep 16-byte alignment for float4 and friends.
    size_t aligned = (bytes + 15) / 16 * 16;
    emu_ctx.dyn_smem = w->dyn_map + span - aligned;
    w->dyn_len = bytes;
}

}  // namespace launcher

extern "C" {

using namespace launcher;

int emu_in_shared(const void* p, unsigned long n) {
    const Worker* w = t_worker;
    const uintptr_t a = uintptr_t(p);
    if (!w) return 0;
    if (a - uintptr_t(w->tls_lo) < w->tls_len && a + n - uintptr_t(w->tls_lo) <= w->tls_len) return 1;
    return a - uintptr_t(emu_ctx.dyn_smem) < w->dyn_len && a + n - uintptr_t(emu_ctx.dyn_smem) <= w->dyn_len;
}

int emu_in_global(const void* p, unsigned long n) {
    const Launch& L = g_launch;
    const uintptr_t a = uintptr_t(p);
    for (int i = 0; i < L.nargs; ++i)
        if (a - L.arg_lo[i] < L.arg_len[i] && a + n - L.arg_lo[i] <= L.arg_len[i]) return 1;
    return 0;
}

// -fsanitize=alignment calls this (GCC's and clang's ABI) when a typed access uses an address
// that is not a multiple of the type's alignment: a float4 load from x + 1, say. A GPU faults
// with "misaligned address" there. The launch's arrays stand for cudaMalloc'd memory, whose start
// is aligned on a GPU, so inside an array only the offset from its start counts.
struct UbsanLocation {
    const char* file;
    uint32_t line, column;
};
struct UbsanType {
    uint16_t kind, info;
    char name[1];
};
struct UbsanMismatch {
    UbsanLocation loc;
    const UbsanType* type;
    unsigned char log_alignment;
    unsigned char check_kind;
};

__attribute__((visibility("default"))) void __ubsan_handle_type_mismatch_v1(UbsanMismatch* d, uintptr_t p) {
    if (!p) return;  // null pointers fault by themselves, with the usual report
    const uintptr_t align = uintptr_t(1) << d->log_alignment;
    const Launch& L = g_launch;
    const char* where = "";
    uintptr_t off = p;
    for (int i = 0; i < L.nargs; ++i)
        if (p - L.arg_lo[i] < L.arg_len[i]) {
            off = p - L.arg_lo[i];
            where = " (counted from the start of the array, which is aligned as cudaMalloc's are)";
            break;
        }
    if (off % align == 0) return;
    emu_usage_error(int(d->loc.line),
                    "misaligned address: an access to a %s at address 0x%lx, which is not a multiple of %lu bytes%s. A GPU "
                    "stops the kernel with 'misaligned address' here. A %lu-byte access (float4, int4, a half2 pair, "
                    "...) must start at a multiple of %lu bytes: index vectors as whole units (v[i] of a float4 "
                    "pointer), not from an arbitrary element.",
                    d->type->name, (unsigned long)p, (unsigned long)align, where, (unsigned long)align,
                    (unsigned long)align);
}
// -fsanitize=bounds calls this when a fixed-size array (a __shared__ tile, a local array) is
// indexed outside its declared size.
struct UbsanOutOfBounds {
    UbsanLocation loc;
    const UbsanType* array;
    const UbsanType* index;
};

__attribute__((visibility("default"))) void __ubsan_handle_out_of_bounds(UbsanOutOfBounds* d, uintptr_t index) {
    claim_report();
    fill_location(g_err);
    g_err->kind = kBounds;
    g_err->line = int(d->loc.line);
    // The index type's low info bit says signed; its width is 2^(info >> 1) bits.
    const bool is_signed = d->index->info & 1;
    const unsigned bits = 1u << (d->index->info >> 1);
    long long value = (long long)index;
    if (is_signed && bits < 64) value = (long long)(index << (64 - bits)) >> (64 - bits);
    if (is_signed)
        snprintf(g_err->text, sizeof g_err->text, "index %lld into %s", value, d->array->name);
    else
        snprintf(g_err->text, sizeof g_err->text, "index %llu into %s", (unsigned long long)index, d->array->name);
    finish_report();
}
__attribute__((visibility("default"))) void __ubsan_handle_out_of_bounds_abort(UbsanOutOfBounds* d, uintptr_t index) {
    __ubsan_handle_out_of_bounds(d, index);
}

__attribute__((visibility("default"))) void __ubsan_handle_type_mismatch_v1_abort(UbsanMismatch* d, uintptr_t p) {
    __ubsan_handle_type_mismatch_v1(d, p);
}

}  // extern "C"
