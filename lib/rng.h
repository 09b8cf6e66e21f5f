/* rng.h: splitmix64, the one small generator for seeding and workloads. */
#ifndef PHASED_RNG_H
#define PHASED_RNG_H

#include <stdint.h>

/*
 * Advance *state and return 64 well-mixed bits (Steele, Lea and Flood's
 * splitmix64).  Any state, zero included, is a valid seed.
 */
static inline uint64_t
splitmix64(uint64_t *state)
{
	uint64_t	z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

#endif
