/* rng.h: splitmix64 and its mix, for seeding, workloads and hashing. */
#ifndef PHASED_RNG_H
#define PHASED_RNG_H

#include <stdint.h>

/* Mix 64 bits into 64 (splitmix64's finalizer): a hash for integer keys. */
static inline uint64_t
mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

/*
 * Advance *state and return 64 well-mixed bits (Steele, Lea and Flood's
 * splitmix64).  Any state, zero included, is a valid seed.
 */
static inline uint64_t
splitmix64(uint64_t *state)
{
	return (mix64(*state += 0x9e3779b97f4a7c15ULL));
}

#endif
