/*
 * CRC-32C (Castagnoli), the checksum of `.ghm` offline model files
 * (ge_hub/offline/layout.py).
 *
 * A file's whole-file checksum covers its weights, so it is read on every load: with SSE4.2
 * (chosen at run time) the CPU's crc32 instruction checks 8 bytes per step, several times
 * faster than zlib's table-driven CRC-32; without it, a slicing-by-8 table loop gives the
 * same values.
 */
#ifndef GE_HUB_CHECKSUM_H
#define GE_HUB_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of `size` bytes continuing from `crc` (0 to start), as zlib's crc32 chains:
 * ge_crc32c(b, ge_crc32c(a, 0)) is the CRC of a followed by b. `force_portable` picks the
 * table loop even where SSE4.2 is present (for tests). */
uint32_t ge_crc32c(const void *data, size_t size, uint32_t crc, int force_portable);

/* Whether the SSE4.2 instruction path is used on this CPU. */
int ge_crc32c_hardware(void);

#endif /* GE_HUB_CHECKSUM_H */
