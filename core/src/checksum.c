/* CRC-32C for .ghm files: SSE4.2's crc32 instruction, or a slicing-by-8 table (see
 * checksum.h). */
#include "checksum.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */

/* The hardware path runs three independent chains over three consecutive blocks of BLOCK
 * bytes (the instruction's latency is three times its throughput) and joins them: a CRC
 * register r followed by BLOCK more bytes is r times x^(8 BLOCK) mod P, xor the CRC of
 * those bytes from 0 (CRC is linear). */
#define BLOCK 4096

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static int hardware;
static uint32_t shift_block; /* x^(8 BLOCK) mod P, reflected */

/* a * b mod P, both reflected (bit 31 is x^0). */
static uint32_t multiply(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
        if (a & m) {
            product ^= b;
        }
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return product;
}

static void init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        }
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
        }
    }
    uint32_t power = 1u << 31; /* x^0 */
    for (int i = 0; i < 8 * BLOCK; i++) {
        power = power & 1 ? (power >> 1) ^ CRC32C_POLY : power >> 1;
    }
    shift_block = power;
#if defined(__x86_64__) || defined(__i386__)
    hardware = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t portable(const unsigned char *p, size_t n, uint32_t c) {
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= c; /* little-endian: the running CRC meets the first four bytes */
        c = table[7][word & 0xFF] ^ table[6][(word >> 8) & 0xFF] ^
            table[5][(word >> 16) & 0xFF] ^ table[4][(word >> 24) & 0xFF] ^
            table[3][(word >> 32) & 0xFF] ^ table[2][(word >> 40) & 0xFF] ^
            table[1][(word >> 48) & 0xFF] ^ table[0][word >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) {
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xFF];
    }
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t sse42(const unsigned char *p, size_t n, uint32_t c) {
    while (n >= 3 * BLOCK) {
        uint64_t a = c, b = 0, d = 0;
        for (size_t i = 0; i < BLOCK; i += 8) {
            uint64_t wa, wb, wd;
            memcpy(&wa, p + i, 8);
            memcpy(&wb, p + BLOCK + i, 8);
            memcpy(&wd, p + 2 * BLOCK + i, 8);
            a = __builtin_ia32_crc32di(a, wa);
            b = __builtin_ia32_crc32di(b, wb);
            d = __builtin_ia32_crc32di(d, wd);
        }
        c = multiply((uint32_t)a, shift_block) ^ (uint32_t)b;
        c = multiply(c, shift_block) ^ (uint32_t)d;
        p += 3 * BLOCK;
        n -= 3 * BLOCK;
    }
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c64 = __builtin_ia32_crc32di(c64, word);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) {
        c = __builtin_ia32_crc32qi(c, *p++);
    }
    return c;
}
#endif

uint32_t ge_crc32c(const void *data, size_t size, uint32_t crc, int force_portable) {
    pthread_once(&table_once, init);
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (hardware && !force_portable) {
        return ~sse42(data, size, c);
    }
#else
    (void)force_portable;
#endif
    return ~portable(data, size, c);
}

int ge_crc32c_hardware(void) {
    pthread_once(&table_once, init);
    return hardware;
}
