// Whether this test binary runs under a sanitizer (scripts/sanitize.sh's trees: ASan + UBSan, or
// TSan; tests/CMakeLists.txt defines TG_SANITIZED there). A sanitizer looks for memory errors and
// races, which the paths a sweep takes show, not for numbers, which every combination of its
// parameters checks: so the exhaustive sweeps visit every path but fewer combinations under one
// (each says which), and the plain ctest run keeps the whole matrix. Header-only.
#pragma once

namespace tg::testing {

#if defined(TG_SANITIZED) && TG_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace tg::testing
