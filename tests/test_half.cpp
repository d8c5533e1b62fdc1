// test_half.cpp — bfloat16 and float16 conversions (core/half.h) against PyTorch 2.15's,
// for every class of float32 bit pattern, and every one of the 65,536 16-bit patterns
// back and forth.
//
// The golden table comes from this script (torch 2.15.0):
//
//   import torch, struct
//   f32 = lambda b: struct.unpack('<f', struct.pack('<I', b))[0]
//   x = torch.tensor([f32(b) for b in pats], dtype=torch.float32)     # pats: the first column
//   bf = x.to(torch.bfloat16).view(torch.int16); hf = x.to(torch.float16).view(torch.int16)
//   h = torch.tensor(halves, dtype=torch.int16).view(torch.float16).to(torch.float32)
//
// NaNs are compared by NaN-ness: torch's vectorised CPU conversion writes every NaN as one
// pattern (0xFFFF for bfloat16, 0x7FFFFFFF back from float16); ours keeps sign and payload.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "test_helpers.h"

#include <ringgrad/core/half.h>

namespace {

struct Golden {
  uint32_t f32;
  uint16_t bf16, f16;
};

// float32 bits → torch's bfloat16 and float16 bits.
constexpr Golden kToHalf[] = {
    {0x00000000, 0x0000, 0x0000}, {0x80000000, 0x8000, 0x8000},  // ±0
    {0x3f800000, 0x3f80, 0x3c00}, {0xbf800000, 0xbf80, 0xbc00},  // ±1
    {0x7f800000, 0x7f80, 0x7c00}, {0xff800000, 0xff80, 0xfc00},  // ±inf
    {0x00000001, 0x0000, 0x0000}, {0x007fffff, 0x0080, 0x0000},  // float32 subnormals
    {0x00800000, 0x0080, 0x0000},                                // smallest float32 normal
    {0x3f808000, 0x3f80, 0x3c04}, {0x3f818000, 0x3f82, 0x3c0c},  // bfloat16 halfway: to even
    {0x3f808001, 0x3f81, 0x3c04}, {0x3f807fff, 0x3f80, 0x3c04},  // just above, just below
    {0x7f7fffff, 0x7f80, 0x7c00}, {0x7f7f8000, 0x7f80, 0x7c00},  // float32 max: rounds to inf
    {0x477fe000, 0x4780, 0x7bff}, {0x477ff000, 0x4780, 0x7c00},  // 65504; 65520: float16 inf
    {0x477fefff, 0x4780, 0x7bff}, {0x47800000, 0x4780, 0x7c00},  // just below 65520; 65536
    {0x33800000, 0x3380, 0x0001}, {0x33000000, 0x3300, 0x0000},  // 2^-24; 2^-25: tie to 0
    {0x33000001, 0x3300, 0x0001}, {0x387fc000, 0x3880, 0x03ff},  // above the tie; largest subnormal
    {0x38800000, 0x3880, 0x0400}, {0x387fe000, 0x3880, 0x0400},  // 2^-14; a tie up to it
    {0x3eaaaaab, 0x3eab, 0x3555}, {0xc0490fdb, 0xc049, 0xc248},  // 1/3, -pi
    {0x40490fdb, 0x4049, 0x4248}, {0x3dcccccd, 0x3dcd, 0x2e66},  // pi, 0.1
};

// float16 bits → torch's float32 bits.
constexpr std::pair<uint16_t, uint32_t> kFromHalf[] = {
    {0x0000, 0x00000000}, {0x8000, 0x80000000}, {0x0001, 0x33800000}, {0x03ff, 0x387fc000},
    {0x0400, 0x38800000}, {0x3c00, 0x3f800000}, {0x7bff, 0x477fe000}, {0x7c00, 0x7f800000},
    {0xfc00, 0xff800000}, {0x3555, 0x3eaaa000},
};

bool is_nan_bf16(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }
bool is_nan_f16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

}  // namespace

TEST_CASE("half: float32 to bfloat16 and float16 as torch rounds, every pattern class") {
  for (const Golden& g : kToHalf) {
    CAPTURE(g.f32);
    const float f = rg::float_from_bits(g.f32);
    CHECK(rg::float_to_bfloat16_bits(f) == g.bf16);
    CHECK(rg::float_to_half_bits(f) == g.f16);
  }
  // NaNs (quiet, signalling, negative, with payloads) stay NaNs, quiet, with their sign.
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0xff812345u}) {
    CAPTURE(nan);
    const float f = rg::float_from_bits(nan);
    const uint16_t b = rg::float_to_bfloat16_bits(f), h = rg::float_to_half_bits(f);
    CHECK(is_nan_bf16(b));
    CHECK(is_nan_f16(h));
    CHECK((b & 0x0040) != 0);  // quiet
    CHECK((h & 0x0200) != 0);
    CHECK((b >> 15) == (nan >> 31));
    CHECK((h >> 15) == (nan >> 31));
  }
}

TEST_CASE("half: float16 to float32 as torch, and all 65,536 patterns round-trip") {
  for (auto [h, want] : kFromHalf) {
    CAPTURE(h);
    CHECK(rg::float_bits(rg::half_bits_to_float(h)) == want);
  }
  int nans = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto p = uint16_t(i);
    const float fh = rg::half_bits_to_float(p), fb = rg::bfloat16_bits_to_float(p);
    // bfloat16 → float32 is the top half; float16 → float32 exact: both come back unchanged.
    CHECK(rg::float_bits(fb) == i << 16);
    if (is_nan_f16(p)) {
      ++nans;
      CHECK(std::isnan(fh));
      CHECK(is_nan_f16(rg::float_to_half_bits(fh)));
    } else {
      if (rg::float_to_half_bits(fh) != p) FAIL_CHECK("float16 pattern " << i << " does not round-trip");
    }
    if (is_nan_bf16(p)) {
      CHECK(is_nan_bf16(rg::float_to_bfloat16_bits(fb)));
    } else if (rg::float_to_bfloat16_bits(fb) != p) {
      FAIL_CHECK("bfloat16 pattern " << i << " does not round-trip");
    }
  }
  CHECK(nans == 2 * 1023);  // exponent all ones, mantissa not zero, either sign
  // Across float16's finite range, the rounding error is at most half a unit in the last
  // place (2^-11 relative; 2^-25 absolute among the subnormals); from 65520 on: infinity.
  for (float x = -70000.0f; x < 70000.0f; x += 7.25f) {
    const float r = rg::half_bits_to_float(rg::float_to_half_bits(x));
    if (std::abs(x) >= 65520.0f)
      CHECK(std::isinf(r));
    else
      CHECK(std::abs(r - x) <= std::max(std::abs(x) * 0x1p-11f, 0x1p-25f));
  }
  for (float x = 1e-9f; x < 1e-3f; x *= 1.01f) {
    const float r = rg::half_bits_to_float(rg::float_to_half_bits(x));
    CHECK(std::abs(r - x) <= std::max(x * 0x1p-11f, 0x1p-25f));
  }
}
