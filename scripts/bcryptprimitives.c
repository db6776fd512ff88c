/* Wine 8.0 (Debian bookworm) lacks bcryptprimitives.dll, which Rust >= 1.78 std imports (ProcessPrng) on
   Windows. Test-only stand-in, installed into the Wine prefix by scripts/toolchains.sh: forwards to
   RtlGenRandom. Never shipped. */
#include <windows.h>
#include <ntsecapi.h>
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len) {
        ULONG n = len > 0x7fffffff ? 0x7fffffff : (ULONG)len;
        if (!RtlGenRandom(data, n)) return FALSE;
        data += n; len -= n;
    }
    return TRUE;
}
