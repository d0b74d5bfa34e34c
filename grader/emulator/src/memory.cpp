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
