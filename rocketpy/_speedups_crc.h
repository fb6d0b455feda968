/* The body CRC of a record (zlib's CRC-32, the IEEE polynomial reflected) without a call into
 * Python's zlib module: by carry-less multiplication (PCLMULQDQ) when the CPU has it, folding 64
 * bytes a step (Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", the
 * bit-reflected constants at its end; the same scheme as Chromium's zlib crc32_simd.c), the tail
 * and short inputs by a byte table. crc_fast_ready is 0 on other CPUs and compilers: then the
 * caller uses zlib.crc32. tests/common/test_speedups_crc.py checks it against zlib.crc32. */
#include <stddef.h>
#include <stdint.h>

static uint32_t crc_table[256];
static int crc_fast_ready;

/* Bytewise, on the inverted state (as the folding loop). */
static uint32_t crc_bytes(uint32_t state, const unsigned char *p, size_t n) {
    while (n--)
        state = crc_table[(state ^ *p++) & 0xFF] ^ (state >> 8);
    return state;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CRC_HAVE_CLMUL 1

/* The inverted state after ``n`` bytes, n >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_clmul(uint32_t state, const unsigned char *buf, size_t n) {
    static const uint64_t k1k2[2] __attribute__((aligned(16))) = {0x0154442bd4ULL, 0x01c6e41596ULL};
    static const uint64_t k3k4[2] __attribute__((aligned(16))) = {0x01751997d0ULL, 0x00ccaa009eULL};
    static const uint64_t k5k0[2] __attribute__((aligned(16))) = {0x0163cd6124ULL, 0x0000000000ULL};
    static const uint64_t poly[2] __attribute__((aligned(16))) = {0x01db710641ULL, 0x01f7011641ULL};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)state));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    n -= 64;
    while (n >= 64) {  /* four 128-bit lanes folded in parallel */
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        n -= 64;
    }
    /* the four lanes into one */
    x0 = _mm_load_si128((const __m128i *)k3k4);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (n >= 16) {  /* what is left, 16 bytes a step */
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        n -= 16;
    }
    /* 128 bits to 64 */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits */
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

/* zlib.crc32(data), when crc_fast_ready. */
static uint32_t crc_fast(const unsigned char *p, size_t n) {
    uint32_t state = 0xFFFFFFFFu;
#ifdef CRC_HAVE_CLMUL
    if (n >= 64) {
        size_t folded = n & ~(size_t)15;
        state = crc_clmul(state, p, folded);
        p += folded;
        n -= folded;
    }
#endif
    return ~crc_bytes(state, p, n);
}

/* The table, and whether crc_fast may run (it needs the CPU's carry-less multiplication). */
static void crc_setup(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
#ifdef CRC_HAVE_CLMUL
    __builtin_cpu_init();
    crc_fast_ready = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}
