/* amx.h: Intel AMX tile kernels for large batches on repacked weights. */
#ifndef PHASED_AMX_H
#define PHASED_AMX_H

#include <stdint.h>

#include "quant.h"

/*
 * Whether the AMX tile unit can be used: the CPU has AMX-TILE and
 * AMX-INT8 (and the AVX-512 variant), the OS enabled the tile state, the
 * kernel granted this process the tile data permission (asked for once,
 * on the first call, from whichever thread) and a small product on the
 * tiles gave the right answer.  Never fails loudly: the kernels simply
 * keep to AVX-512 when it returns 0.
 */
int	quant_amx_supported(void);

/*
 * Allow the AMX kernels where supported (the default); read by
 * qmat_create().  Returns the previous setting.
 */
int	quant_allow_amx(int allow);
int	quant_amx_allowed(void);

/*
 * Give a kernel of the AVX-512 variant on weights repacked at load its AMX
 * companion (afn, anr) when the type has one and AMX is supported and
 * allowed; otherwise leave afn NULL.
 */
void	quant_amx_attach(struct quant_kernel *k, uint32_t type);

/* Internal: the kernels of amx.c (built with AMX enabled). */
quant_packed_fn	amx_packed_kernel(uint32_t type);
int		amx_selftest(void);

#endif
