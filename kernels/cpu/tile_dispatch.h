/*
 * tile_dispatch.h: the switch from a tile's run-time shape to the
 * compile-time shapes of an always-inlined tile function, shared by the
 * repacked AVX-512 kernels and the AVX2 16-bit integer ones.
 */
#ifndef PHASED_TILE_DISPATCH_H
#define PHASED_TILE_DISPATCH_H

/*
 * Call tile(kind, pw, cols, r0, G, mr, a, t0, NR, y, ldy) with G = 2
 * groups of rows when mr is over one group of pg, else 1, and NR = nr
 * (1..5, 6 for anything larger): constants, so each call site unrolls.
 */
#define TILE_DISPATCH_NR(tile, kind, g, pw, cols, r0, mr, a, t0, nr, y, ldy) \
	switch (nr) {							\
	case 1: tile(kind, pw, cols, r0, g, mr, a, t0, 1, y, ldy); break; \
	case 2: tile(kind, pw, cols, r0, g, mr, a, t0, 2, y, ldy); break; \
	case 3: tile(kind, pw, cols, r0, g, mr, a, t0, 3, y, ldy); break; \
	case 4: tile(kind, pw, cols, r0, g, mr, a, t0, 4, y, ldy); break; \
	case 5: tile(kind, pw, cols, r0, g, mr, a, t0, 5, y, ldy); break; \
	default: tile(kind, pw, cols, r0, g, mr, a, t0, 6, y, ldy); break; \
	}

#define TILE_DISPATCH(tile, kind, pg, pw, cols, r0, mr, a, t0, nr, y, ldy) \
	do {								\
		if ((mr) > (pg)) {					\
			TILE_DISPATCH_NR(tile, kind, 2, pw, cols, r0, mr, \
			    a, t0, nr, y, ldy)				\
		} else {						\
			TILE_DISPATCH_NR(tile, kind, 1, pw, cols, r0, mr, \
			    a, t0, nr, y, ldy)				\
		}							\
	} while (0)

/*
 * Call tile(pw, cols, r0, mg, mr, a, t0, NR, y, ldy) and return, NR being
 * nr capped at n (n <= 12), a constant in each case; the variables are
 * those of the caller.
 */
#define TILE_DISPATCH_NR12(tile, mg, n)					\
	switch (nr < (n) ? nr : (n)) {					\
	case 1: tile(pw, cols, r0, mg, mr, a, t0, 1, y, ldy); return;	\
	case 2: tile(pw, cols, r0, mg, mr, a, t0, 2, y, ldy); return;	\
	case 3: tile(pw, cols, r0, mg, mr, a, t0, 3, y, ldy); return;	\
	case 4: tile(pw, cols, r0, mg, mr, a, t0, 4, y, ldy); return;	\
	case 5: tile(pw, cols, r0, mg, mr, a, t0, 5, y, ldy); return;	\
	case 6: tile(pw, cols, r0, mg, mr, a, t0, 6, y, ldy); return;	\
	case 7: tile(pw, cols, r0, mg, mr, a, t0, 7, y, ldy); return;	\
	case 8: tile(pw, cols, r0, mg, mr, a, t0, 8, y, ldy); return;	\
	case 9: tile(pw, cols, r0, mg, mr, a, t0, 9, y, ldy); return;	\
	case 10: tile(pw, cols, r0, mg, mr, a, t0, 10, y, ldy); return; \
	case 11: tile(pw, cols, r0, mg, mr, a, t0, 11, y, ldy); return; \
	default: tile(pw, cols, r0, mg, mr, a, t0, 12, y, ldy); return; \
	}

/* The same with n <= 4. */
#define TILE_DISPATCH_NR4(tile, mg, n)					\
	switch (nr < (n) ? nr : (n)) {					\
	case 1: tile(pw, cols, r0, mg, mr, a, t0, 1, y, ldy); return;	\
	case 2: tile(pw, cols, r0, mg, mr, a, t0, 2, y, ldy); return;	\
	case 3: tile(pw, cols, r0, mg, mr, a, t0, 3, y, ldy); return;	\
	default: tile(pw, cols, r0, mg, mr, a, t0, 4, y, ldy); return;	\
	}

#endif
