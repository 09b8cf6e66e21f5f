/* unicode.c: general categories, White_Space and UTF-8 for the tokenizers. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "unicode.h"

/* The value of the range holding cp in a sorted table, 0 if none does. */
static uint8_t
range_find(const struct ucat_range *r, size_t n, uint32_t cp)
{
	size_t	lo = 0, hi = n, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (cp < r[mid].lo)
			hi = mid;
		else if (cp > r[mid].hi)
			lo = mid + 1;
		else
			return (r[mid].cat);
	}
	return (0);
}

/* The general category of a code point, by binary search of the table. */
enum ucat
ucat_of(uint32_t cp)
{
	return ((enum ucat)range_find(ucat_ranges, ucat_nranges, cp));
}

/* The case of a letter, by binary search of its table. */
enum ulcase
uc_letter_case(uint32_t cp)
{
	if (cp < 0x80) {
		if (cp >= 'A' && cp <= 'Z')
			return (ULC_UPPER);
		if (cp >= 'a' && cp <= 'z')
			return (ULC_LOWER);
		return (ULC_NONE);
	}
	return ((enum ulcase)range_find(ulc_ranges, ulc_nranges, cp));
}

/* Whether a code point has the White_Space property. */
int
uc_is_space(uint32_t cp)
{
	if (cp < 0x80)
		return (cp == ' ' || (cp >= 0x09 && cp <= 0x0d));
	switch (cp) {
	case 0x0085:
	case 0x00a0:
	case 0x1680:
	case 0x2028:
	case 0x2029:
	case 0x202f:
	case 0x205f:
	case 0x3000:
		return (1);
	}
	return (cp >= 0x2000 && cp <= 0x200a);
}

/* Length of the UTF-8 sequence a lead byte starts, 0 if it cannot lead. */
size_t
utf8_lead_len(unsigned char b)
{
	if (b < 0x80)
		return (1);
	if (b >= 0xc2 && b <= 0xdf)
		return (2);
	if (b >= 0xe0 && b <= 0xef)
		return (3);
	if (b >= 0xf0 && b <= 0xf4)
		return (4);
	return (0);
}

/*
 * Whether byte b is acceptable at position pos (1..3) of a sequence led by
 * lead.  The second byte has narrower ranges after some leads, which rule
 * out overlong forms, surrogates and code points past U+10FFFF.
 */
int
utf8_cont_ok(unsigned char lead, size_t pos, unsigned char b)
{
	unsigned char	lo = 0x80, hi = 0xbf;

	if (pos == 1) {
		switch (lead) {
		case 0xe0:
			lo = 0xa0;
			break;
		case 0xed:
			hi = 0x9f;
			break;
		case 0xf0:
			lo = 0x90;
			break;
		case 0xf4:
			hi = 0x8f;
			break;
		}
	}
	return (b >= lo && b <= hi);
}

/* Decode one UTF-8 sequence; an invalid one is a single byte. */
size_t
utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t		len, i;
	uint32_t	c;

	len = utf8_lead_len(s[0]);
	if (len == 1) {
		*cp = s[0];
		return (1);
	}
	if (len == 0 || len > n)
		goto invalid;
	for (i = 1; i < len; i++) {
		if (!utf8_cont_ok(s[0], i, s[i]))
			goto invalid;
	}
	c = s[0] & (0x7f >> len);
	for (i = 1; i < len; i++)
		c = (c << 6) | (s[i] & 0x3f);
	*cp = c;
	return (len);

invalid:
	*cp = UC_INVALID;
	return (1);
}

/* Encode a code point as UTF-8. */
size_t
utf8_encode(uint32_t cp, char *buf)
{
	unsigned char	*p = (unsigned char *)buf;

	if (cp < 0x80) {
		p[0] = cp;
		return (1);
	}
	if (cp < 0x800) {
		p[0] = 0xc0 | (cp >> 6);
		p[1] = 0x80 | (cp & 0x3f);
		return (2);
	}
	if (cp < 0x10000) {
		p[0] = 0xe0 | (cp >> 12);
		p[1] = 0x80 | ((cp >> 6) & 0x3f);
		p[2] = 0x80 | (cp & 0x3f);
		return (3);
	}
	p[0] = 0xf0 | (cp >> 18);
	p[1] = 0x80 | ((cp >> 12) & 0x3f);
	p[2] = 0x80 | ((cp >> 6) & 0x3f);
	p[3] = 0x80 | (cp & 0x3f);
	return (4);
}
