/* tok_pre.c: the BPE pre-tokenizers named by tokenizer.ggml.pre. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"
#include "unicode.h"
#include "util.h"

/*
 * A pre-tokenizer cuts text into the words BPE merges within.  The
 * published ones are regular expressions, or sequences of them where each
 * one splits the pieces the previous one left: what a pattern matches is a
 * piece, and so is each stretch between two matches.  There is no regex
 * engine here: each pattern is a hand-written matcher over Unicode
 * classes that returns where its leftmost-first match starting at a code
 * point ends, and the passes run the matchers the way a regex iterator
 * does.  A rule is its list of passes.
 */

/* Character classes, one byte per code point. */
#define CL_LETTER	0x01	/* \p{L} */
#define CL_NUMBER	0x02	/* \p{N} */
#define CL_SPACE	0x04	/* \s */
#define CL_PUNCT	0x08	/* \p{P} */
#define CL_SYMBOL	0x10	/* \p{S} */
#define CL_MARK		0x20	/* \p{M} */
#define CL_UPPER	0x40	/* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
#define CL_LOWER	0x80	/* [\p{Ll}\p{Lm}\p{Lo}\p{M}] */

/* A text as code points with their classes and byte offsets. */
struct cps {
	uint32_t	*cp;
	uint8_t		*cl;
	uint32_t	*off;		/* n + 1 entries */
	uint32_t	*space_end;	/* where the whitespace run from each one ends */
	size_t		 n;
};

/* Where the match of a pattern at i ends, i when there is none; end bounds the piece. */
typedef size_t	(*match_fn)(const struct cps *, size_t i, size_t end);

/* A code point range. */
struct cp_range {
	uint32_t	lo;
	uint32_t	hi;
};

/* Classify a code point. */
static uint8_t
classify(uint32_t cp)
{
	uint8_t	c = 0;

	/* ASCII without the table searches, as most text is ASCII. */
	if (cp < 0x80) {
		if (cp >= 'a' && cp <= 'z')
			return (CL_LETTER | CL_LOWER);
		if (cp >= 'A' && cp <= 'Z')
			return (CL_LETTER | CL_UPPER);
		if (cp >= '0' && cp <= '9')
			return (CL_NUMBER);
		if (cp == ' ' || (cp >= '\t' && cp <= '\r'))
			return (CL_SPACE);
		if (cp < 0x20 || cp == 0x7f)
			return (0);
		return (strchr("$+<=>^`|~", (int)cp) != NULL ? CL_SYMBOL : CL_PUNCT);
	}
	/* An invalid byte reads as U+FFFD, a symbol. */
	if (cp == UC_INVALID)
		return (CL_SYMBOL);
	if (uc_is_space(cp))
		c |= CL_SPACE;
	switch (ucat_of(cp)) {
	case UCAT_LETTER:
		c |= CL_LETTER;
		switch (uc_letter_case(cp)) {
		case ULC_UPPER:
			c |= CL_UPPER;
			break;
		case ULC_LOWER:
			c |= CL_LOWER;
			break;
		default:
			c |= CL_UPPER | CL_LOWER;
			break;
		}
		break;
	case UCAT_MARK:
		c |= CL_MARK | CL_UPPER | CL_LOWER;
		break;
	case UCAT_NUMBER:
		c |= CL_NUMBER;
		break;
	case UCAT_PUNCT:
		c |= CL_PUNCT;
		break;
	case UCAT_SYMBOL:
		c |= CL_SYMBOL;
		break;
	default:
		break;
	}
	return (c);
}

/* Decode text into code points (an invalid byte counts as one). */
static void
cps_build(struct cps *x, const unsigned char *u, size_t len)
{
	size_t	i, l;

	x->cp = xreallocarray(NULL, len ? len : 1, sizeof *x->cp);
	x->off = xreallocarray(NULL, len + 1, sizeof *x->off);
	x->cl = xmalloc(len ? len : 1);
	x->n = 0;
	for (i = 0; i < len; i += l) {
		l = utf8_decode(u + i, len - i, &x->cp[x->n]);
		x->cl[x->n] = classify(x->cp[x->n]);
		x->off[x->n++] = i;
	}
	x->off[x->n] = len;
	x->space_end = xreallocarray(NULL, x->n + 1, sizeof *x->space_end);
	x->space_end[x->n] = x->n;
	for (i = x->n; i-- > 0; )
		x->space_end[i] = x->cl[i] & CL_SPACE ? x->space_end[i + 1] : i;
}

/* Free what cps_build allocated. */
static void
cps_free(struct cps *x)
{
	free(x->cp);
	free(x->cl);
	free(x->off);
	free(x->space_end);
}

#define HAS(x, i, m)	((x)->cl[i] & (m))
#define IS_NL(x, i)	((x)->cp[i] == '\r' || (x)->cp[i] == '\n')

/* The end of the run of code points from i that have a class in mask. */
static size_t
run(const struct cps *x, size_t i, size_t end, uint8_t mask)
{
	while (i < end && HAS(x, i, mask))
		i++;
	return (i);
}

/* The end of the run of newlines from i. */
static size_t
run_nl(const struct cps *x, size_t i, size_t end)
{
	while (i < end && IS_NL(x, i))
		i++;
	return (i);
}

/* Whether cp lies in one of n sorted ranges. */
static int
in_ranges(uint32_t cp, const struct cp_range *r, size_t n)
{
	size_t	lo = 0, hi = n, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (cp < r[mid].lo)
			hi = mid;
		else if (cp > r[mid].hi)
			lo = mid + 1;
		else
			return (1);
	}
	return (0);
}

/* The end of the run of code points from i that lie in the ranges. */
static size_t
run_ranges(const struct cps *x, size_t i, size_t end, const struct cp_range *r,
    size_t n)
{
	while (i < end && in_ranges(x->cp[i], r, n))
		i++;
	return (i);
}

#define NRANGES(r)	(sizeof (r) / sizeof (r)[0])

/*
 * 's 't 're 've 'm 'll 'd at i (in any case if fold): the end of the one
 * that matches, or i.
 */
static size_t
contraction(const struct cps *x, size_t i, size_t end, int fold)
{
	uint32_t	c1, c2;

	if (i + 1 >= end || x->cp[i] != '\'')
		return (i);
	c1 = x->cp[i + 1];
	if (fold && c1 >= 'A' && c1 <= 'Z')
		c1 |= 0x20;
	if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
		return (i + 2);
	if (i + 2 >= end)
		return (i);
	c2 = x->cp[i + 2];
	if (fold && c2 >= 'A' && c2 <= 'Z')
		c2 |= 0x20;
	if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
	    (c1 == 'l' && c2 == 'l'))
		return (i + 3);
	return (i);
}

/*
 * \s+(?!\S)|\s+ for the whitespace at i: the run, less its last character
 * when something other than whitespace follows in the piece and the run is
 * longer than one (that one goes with the next word).
 */
static size_t
space_run(const struct cps *x, size_t i, size_t end)
{
	size_t	j = run(x, i, end, CL_SPACE);

	if (j < end && j - i > 1)
		j--;
	return (j);
}

/* \s*[\r\n]+: through the last newline of the whitespace run at i, or i. */
static size_t
space_nl(const struct cps *x, size_t i, size_t end)
{
	size_t	j, nl = i;

	for (j = i; j < end && HAS(x, j, CL_SPACE); j++) {
		if (IS_NL(x, j))
			nl = j + 1;
	}
	return (nl);
}

/*
 * An optional space, then a run of the classes in mask (" ?X+"); the end,
 * or i when there is no run.
 */
static size_t
opt_space_run(const struct cps *x, size_t i, size_t end, uint8_t mask)
{
	size_t	j = i;

	if (x->cp[i] == ' ' && i + 1 < end && HAS(x, i + 1, mask))
		j = i + 1;
	if (!HAS(x, j, mask))
		return (i);
	return (run(x, j, end, mask));
}

/* "X+" or " ?X+" where X is anything but whitespace, letters and numbers. */
static size_t
other_run(const struct cps *x, size_t i, size_t end, uint8_t not, int space)
{
	size_t	j = i;

	if (space && x->cp[i] == ' ' && i + 1 < end && !HAS(x, i + 1, not))
		j = i + 1;
	if (HAS(x, j, not))
		return (i);
	while (j < end && !HAS(x, j, not))
		j++;
	return (j);
}

/*
 * GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
 * \s+(?!\S)|\s+
 */
static size_t
m_gpt2(const struct cps *x, size_t i, size_t end)
{
	size_t	j;

	if ((j = contraction(x, i, end, 0)) != i)
		return (j);
	if ((j = opt_space_run(x, i, end, CL_LETTER)) != i)
		return (j);
	if ((j = opt_space_run(x, i, end, CL_NUMBER)) != i)
		return (j);
	if ((j = other_run(x, i, end, CL_SPACE | CL_LETTER | CL_NUMBER, 1)) != i)
		return (j);
	return (space_run(x, i, end));
}

/*
 * The Llama 3 shape and its descendants:
 *	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?WORD|\p{N}{1,D}|
 *	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * where WORD is \p{L}+, [\p{L}\p{M}]+, or a cased word (Tekken, GPT-4o).
 */
struct modern {
	int	contraction;	/* the contractions come first */
	uint8_t	word;		/* classes a plain word is a run of */
	int	cased;		/* words split where lower case turns upper */
	int	suffix;		/* a cased word takes a contraction after it */
	int	digits;		/* most digits in a number, 0: no limit */
	int	tail;		/* after punctuation: 0 nothing, 1 [\r\n]*, 2 [\r\n/]* */
};

/*
 * A cased word from s: [UPPER]*[LOWER]+ (alt 1) or [UPPER]+[LOWER]*
 * (alt 2), where letters that are neither upper nor lower case, and
 * marks, are both.  Returns the end, or s.
 */
static size_t
cased_word(const struct cps *x, size_t s, size_t end, int alt)
{
	size_t	u = run(x, s, end, CL_UPPER), k;

	if (alt == 2)
		return (u == s ? s : run(x, u, end, CL_LOWER));
	if (u < end && HAS(x, u, CL_LOWER))
		return (run(x, u, end, CL_LOWER));
	/* Backtrack: the last of the upper run that is also lower ends it. */
	for (k = u; k > s; k--) {
		if (HAS(x, k - 1, CL_LOWER))
			return (k);
	}
	return (s);
}

/* [^\r\n\p{L}\p{N}]? then a word; the end, or i. */
static size_t
modern_word(const struct modern *m, const struct cps *x, size_t i, size_t end)
{
	size_t	j;
	int	pre, alt;

	pre = !IS_NL(x, i) && !HAS(x, i, CL_LETTER | CL_NUMBER) && i + 1 < end;
	if (!m->cased) {
		j = pre && HAS(x, i + 1, m->word) ? i + 1 : i;
		return (HAS(x, j, m->word) ? run(x, j, end, m->word) : i);
	}
	/* Each alternative with the prefix, then without it. */
	for (alt = 1; alt <= 2; alt++) {
		if (pre && (j = cased_word(x, i + 1, end, alt)) != i + 1)
			break;
		if ((j = cased_word(x, i, end, alt)) != i)
			break;
	}
	if (alt > 2)
		return (i);
	return (m->suffix ? contraction(x, j, end, 1) : j);
}

/* One match of a Llama 3 shaped pattern at i. */
static size_t
modern(const struct modern *m, const struct cps *x, size_t i, size_t end)
{
	size_t	j;
	uint8_t	not = CL_SPACE | CL_LETTER | CL_NUMBER;

	if (m->contraction && (j = contraction(x, i, end, 1)) != i)
		return (j);
	if ((j = modern_word(m, x, i, end)) != i)
		return (j);
	if (HAS(x, i, CL_NUMBER)) {
		for (j = i; j < end && HAS(x, j, CL_NUMBER) &&
		    (m->digits == 0 || j - i < (size_t)m->digits); j++)
			;
		return (j);
	}
	if (m->word & CL_MARK)
		not |= CL_MARK;
	if ((j = other_run(x, i, end, not, 1)) != i) {
		while (m->tail && j < end &&
		    (IS_NL(x, j) || (m->tail == 2 && x->cp[j] == '/')))
			j++;
		return (j);
	}
	if ((j = space_nl(x, i, end)) != i)
		return (j);
	return (space_run(x, i, end));
}

static const struct modern mod_llama3 = { 1, CL_LETTER, 0, 0, 3, 1 };
static const struct modern mod_qwen2 = { 1, CL_LETTER, 0, 0, 1, 1 };
static const struct modern mod_qwen35 = { 1, CL_LETTER | CL_MARK, 0, 0, 1, 1 };
static const struct modern mod_tekken = { 0, 0, 1, 0, 1, 2 };
static const struct modern mod_gpt4o = { 0, 0, 1, 1, 3, 2 };
static const struct modern mod_minicpm5 = { 1, CL_LETTER, 0, 0, 0, 1 };
static const struct modern mod_seed_coder = { 1, CL_LETTER, 0, 0, 1, 0 };

/* Llama 3: digits in threes. */
static size_t
m_llama3(const struct cps *x, size_t i, size_t end)
{
	return (modern(&mod_llama3, x, i, end));
}

/* Qwen 2: the Llama 3 split with single digits. */
static size_t
m_qwen2(const struct cps *x, size_t i, size_t end)
{
	return (modern(&mod_qwen2, x, i, end));
}

/* Qwen 3.5: Qwen 2 with marks in words. */
static size_t
m_qwen35(const struct cps *x, size_t i, size_t end)
{
	return (modern(&mod_qwen35, x, i, end));
}

/*
 * Tekken: [^\r\n\p{L}\p{N}]?[UPPER]*[LOWER]+|[^\r\n\p{L}\p{N}]?[UPPER]+
 * [LOWER]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 */
static size_t
m_tekken(const struct cps *x, size_t i, size_t end)
{
	return (modern(&mod_tekken, x, i, end));
}

/* GPT-4o: Tekken's words with contractions after them, digits in threes. */
static size_t
m_gpt4o(const struct cps *x, size_t i, size_t end)
{
	return (modern(&mod_gpt4o, x, i, end));
}

/* MiniCPM 5: the Llama 3 split with numbers whole (after a pass of \p{N}{1,3}). */
static size_t
m_minicpm5(const struct cps *x, size_t i, size_t end)
{
	return (modern(&mod_minicpm5, x, i, end));
}

/* Seed-Coder: Qwen 2's split without newlines after punctuation. */
static size_t
m_seed_coder(const struct cps *x, size_t i, size_t end)
{
	return (modern(&mod_seed_coder, x, i, end));
}

/* \p{N} */
static size_t
m_digit(const struct cps *x, size_t i, size_t end)
{
	(void)end;
	return (HAS(x, i, CL_NUMBER) ? i + 1 : i);
}

/* \p{N}{1,3} */
static size_t
m_digits3(const struct cps *x, size_t i, size_t end)
{
	size_t	j;

	for (j = i; j < end && j - i < 3 && HAS(x, j, CL_NUMBER); j++)
		;
	return (j);
}

/* \p{N}+ */
static size_t
m_digits(const struct cps *x, size_t i, size_t end)
{
	return (run(x, i, end, CL_NUMBER));
}

/* [0-9][0-9][0-9] */
static size_t
m_ascii3(const struct cps *x, size_t i, size_t end)
{
	size_t	j;

	for (j = i; j < end && j - i < 3; j++) {
		if (x->cp[j] < '0' || x->cp[j] > '9')
			return (i);
	}
	return (j - i == 3 ? j : i);
}

/* [\r\n] */
static size_t
m_newline(const struct cps *x, size_t i, size_t end)
{
	(void)end;
	return (IS_NL(x, i) ? i + 1 : i);
}

/* \s+$ (in constant time, as the passes try it at every code point) */
static size_t
m_trailing_space(const struct cps *x, size_t i, size_t end)
{
	return (HAS(x, i, CL_SPACE) && x->space_end[i] >= end ? end : i);
}

/* An optional whitespace character, then a run of code points in the ranges. */
static size_t
space_ranges(const struct cps *x, size_t i, size_t end, const struct cp_range *r,
    size_t n)
{
	size_t	j = i, k;

	if (HAS(x, i, CL_SPACE) && i + 1 < end && in_ranges(x->cp[i + 1], r, n))
		j = i + 1;
	k = run_ranges(x, j, end, r, n);
	return (k == j ? i : k);
}

/* An optional whitespace character, then a run of a class (\s?\p{X}+). */
static size_t
space_class(const struct cps *x, size_t i, size_t end, uint8_t mask)
{
	size_t	j = i, k;

	if (HAS(x, i, CL_SPACE) && i + 1 < end && HAS(x, i + 1, mask))
		j = i + 1;
	k = run(x, j, end, mask);
	return (k == j ? i : k);
}

/* The cased letters DeepSeek LLM's pattern lists (a subset of L&). */
static const struct cp_range ds_letters[] = {
	{ 0x0041, 0x005a }, { 0x0061, 0x007a }, { 0x00b5, 0x00b5 },
	{ 0x00c0, 0x00d6 }, { 0x00d8, 0x00f6 }, { 0x00f8, 0x01ba },
	{ 0x01bc, 0x01bf }, { 0x01c4, 0x0293 }, { 0x0295, 0x02af },
	{ 0x0370, 0x0373 }, { 0x0376, 0x0377 }, { 0x037b, 0x037d },
	{ 0x037f, 0x037f }, { 0x0386, 0x0386 }, { 0x0388, 0x038a },
	{ 0x038c, 0x038c }, { 0x038e, 0x03a1 }, { 0x03a3, 0x03f5 },
	{ 0x03f7, 0x0481 }, { 0x048a, 0x052f }, { 0x0531, 0x0556 },
	{ 0x10a0, 0x10c5 }, { 0x13a0, 0x13f5 }, { 0x13f8, 0x13fd },
	{ 0x1c90, 0x1cba }, { 0x1cbd, 0x1cbf }, { 0x1d00, 0x1d2b },
	{ 0x1d6b, 0x1d77 }, { 0x1d79, 0x1d9a }, { 0x1e00, 0x1f15 },
	{ 0x1f18, 0x1f1d }, { 0x1f20, 0x1f45 }, { 0x1f48, 0x1f4d },
	{ 0x1f50, 0x1f57 }, { 0x1f59, 0x1f59 }, { 0x1f5b, 0x1f5b },
	{ 0x1f5d, 0x1f5d }, { 0x1f5f, 0x1f7d }, { 0x1f80, 0x1fb4 },
	{ 0x1fb6, 0x1fbc }, { 0x1fbe, 0x1fbe }, { 0x1fc2, 0x1fc4 },
	{ 0x1fc6, 0x1fcc }, { 0x1fd0, 0x1fd3 }, { 0x1fd6, 0x1fdb },
	{ 0x1fe0, 0x1fec }, { 0x1ff2, 0x1ff4 }, { 0x1ff6, 0x1ffc },
	{ 0x2102, 0x2102 }, { 0x2107, 0x2107 }, { 0x210a, 0x2113 },
	{ 0x2115, 0x2115 }, { 0x2119, 0x211d }, { 0x2124, 0x2124 },
	{ 0x2126, 0x2126 }, { 0x2128, 0x2128 }, { 0x212a, 0x212d },
	{ 0x212f, 0x2134 }, { 0x2139, 0x2139 }, { 0x213c, 0x213f },
	{ 0x2145, 0x2149 }, { 0x214e, 0x214e }, { 0x2183, 0x2184 },
	{ 0x2c00, 0x2c7b }, { 0x2c7e, 0x2ce4 }, { 0x2ceb, 0x2cee },
	{ 0x2cf2, 0x2cf3 }, { 0xa640, 0xa66d }, { 0xa680, 0xa69b },
	{ 0xa722, 0xa76f }, { 0xa771, 0xa787 }, { 0xa78b, 0xa78e },
	{ 0xab70, 0xabbf }, { 0xfb00, 0xfb06 }, { 0xfb13, 0xfb17 },
	{ 0xff21, 0xff3a }, { 0xff41, 0xff5a }, { 0x10400, 0x1044f },
	{ 0x104b0, 0x104d3 }, { 0x104d8, 0x104fb }, { 0x10c80, 0x10cb2 },
	{ 0x10cc0, 0x10cf2 }, { 0x118a0, 0x118df }, { 0x1e900, 0x1e943 },
};

/* DeepSeek LLM's punctuation: ASCII, full-width forms, quotes, CJK marks. */
static const struct cp_range ds_punct[] = {
	{ 0x0021, 0x002f }, { 0x003a, 0x007e }, { 0x2018, 0x201f },
	{ 0x3000, 0x3002 }, { 0xff01, 0xff0f }, { 0xff1a, 0xff5e },
};

/* The DeepSeek LLM and Coder "CJK" ranges: U+0800 to U+9FA5, and Hangul. */
static const struct cp_range ds_cjk[] = {
	{ 0x0800, 0x9fa5 }, { 0xac00, 0xd7ff },
};

/* DeepSeek V3's: CJK ideographs, Hiragana, Katakana. */
static const struct cp_range ds3_cjk[] = {
	{ 0x3040, 0x30ff }, { 0x4e00, 0x9fa5 },
};

/* \s?[cased letters]+ */
static size_t
m_ds_letters(const struct cps *x, size_t i, size_t end)
{
	return (space_ranges(x, i, end, ds_letters, NRANGES(ds_letters)));
}

/* \s?[!-/:-~！-／：-～‘-‟　-。]+ */
static size_t
m_ds_punct(const struct cps *x, size_t i, size_t end)
{
	return (space_ranges(x, i, end, ds_punct, NRANGES(ds_punct)));
}

/* [一-龥ࠀ-一가-퟿]+ */
static size_t
m_ds_cjk(const struct cps *x, size_t i, size_t end)
{
	return (run_ranges(x, i, end, ds_cjk, NRANGES(ds_cjk)));
}

/* [一-龥぀-ゟ゠-ヿ]+ */
static size_t
m_ds3_cjk(const struct cps *x, size_t i, size_t end)
{
	return (run_ranges(x, i, end, ds3_cjk, NRANGES(ds3_cjk)));
}

/* \s?\p{L}+ */
static size_t
m_space_letters(const struct cps *x, size_t i, size_t end)
{
	return (space_class(x, i, end, CL_LETTER));
}

/* \s?\p{P}+ */
static size_t
m_space_punct(const struct cps *x, size_t i, size_t end)
{
	return (space_class(x, i, end, CL_PUNCT));
}

/* Whether cp is ASCII punctuation or a symbol (! to /, : to @, [ to `, { to ~). */
static int
ascii_punct(uint32_t cp)
{
	return ((cp >= 0x21 && cp <= 0x2f) || (cp >= 0x3a && cp <= 0x40) ||
	    (cp >= 0x5b && cp <= 0x60) || (cp >= 0x7b && cp <= 0x7e));
}

/* Whether cp is an ASCII letter. */
static int
ascii_letter(uint32_t cp)
{
	return ((cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z'));
}

/*
 * DeepSeek V3: [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|
 * [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+
 */
static size_t
m_ds3(const struct cps *x, size_t i, size_t end)
{
	size_t	j;

	if (ascii_punct(x->cp[i]) && i + 1 < end && ascii_letter(x->cp[i + 1])) {
		for (j = i + 1; j < end && ascii_letter(x->cp[j]); j++)
			;
		return (j);
	}
	j = i;
	if (!IS_NL(x, i) && !HAS(x, i, CL_LETTER | CL_PUNCT | CL_SYMBOL) &&
	    i + 1 < end && HAS(x, i + 1, CL_LETTER | CL_MARK))
		j = i + 1;
	if (HAS(x, j, CL_LETTER | CL_MARK))
		return (run(x, j, end, CL_LETTER | CL_MARK));
	if ((j = opt_space_run(x, i, end, CL_PUNCT | CL_SYMBOL)) != i)
		return (run_nl(x, j, end));
	if ((j = space_nl(x, i, end)) != i)
		return (j);
	return (space_run(x, i, end));
}

/* Whether cp is one of the symbols Falcon's punctuation runs take. */
static int
falcon_symbol(uint32_t cp)
{
	return (cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' ||
	    cp == '^' || cp == '~' || cp == '|' || cp == '`');
}

/* [\p{P}\$\+<=>\^~\|`]+ */
static size_t
m_falcon_punct(const struct cps *x, size_t i, size_t end)
{
	size_t	j = i;

	while (j < end && (HAS(x, j, CL_PUNCT) || falcon_symbol(x->cp[j])))
		j++;
	return (j);
}

/* Whether cp ends a BLOOM word: whitespace, ( | ) . , ! ? … 。 ， 、 । ۔ ، */
static int
bloom_stop(const struct cps *x, size_t i)
{
	static const uint32_t	stop[] = {
		'(', ')', '|', '.', ',', '!', '?', 0x2026, 0x3002, 0xff0c,
		0x3001, 0x0964, 0x06d4, 0x060c,
	};
	size_t			k;

	if (HAS(x, i, CL_SPACE))
		return (1);
	for (k = 0; k < NRANGES(stop); k++) {
		if (x->cp[i] == stop[k])
			return (1);
	}
	return (0);
}

/* BLOOM: " ?[^(\s|.,!?…。，、।۔،)]+" */
static size_t
m_bloom(const struct cps *x, size_t i, size_t end)
{
	size_t	j = i;

	if (x->cp[i] == ' ' && i + 1 < end && !bloom_stop(x, i + 1))
		j = i + 1;
	if (bloom_stop(x, j))
		return (i);
	while (j < end && !bloom_stop(x, j))
		j++;
	return (j);
}

#define PASSES_MAX	6

/* The passes of each rule, by enum tok_pre. */
static const match_fn rules[TOK_PRE_COUNT][PASSES_MAX] = {
	[TOK_PRE_GPT2] = { m_gpt2 },
	[TOK_PRE_LLAMA3] = { m_llama3 },
	[TOK_PRE_QWEN2] = { m_qwen2 },
	[TOK_PRE_QWEN35] = { m_qwen35 },
	[TOK_PRE_DEEPSEEK_LLM] = { m_newline, m_ds_letters, m_ds_punct,
	    m_trailing_space, m_ds_cjk, m_digits },
	[TOK_PRE_DEEPSEEK_CODER] = { m_newline, m_space_letters,
	    m_space_punct, m_ds_cjk, m_digit },
	[TOK_PRE_DEEPSEEK3] = { m_digits3, m_ds3_cjk, m_ds3 },
	[TOK_PRE_FALCON] = { m_falcon_punct, m_gpt2, m_ascii3 },
	[TOK_PRE_STARCODER] = { m_digit, m_gpt2 },
	[TOK_PRE_TEKKEN] = { m_tekken },
	[TOK_PRE_GPT4O] = { m_gpt4o },
	[TOK_PRE_BLOOM] = { m_bloom },
	[TOK_PRE_VIKING] = { m_bloom, m_digit },
	[TOK_PRE_MINICPM5] = { m_digits3, m_minicpm5 },
	[TOK_PRE_SEED_CODER] = { m_seed_coder },
};

/*
 * One pass: split each piece [s, e) of the code points by a pattern, its
 * matches and what lies between them each becoming a piece.  Pieces are
 * given and returned as the code point index each ends at (the input is
 * far below 4 GiB, so 32 bits hold one).
 */
static size_t
pass(const struct cps *x, match_fn fn, const uint32_t *in, size_t n_in,
    uint32_t *out)
{
	size_t	k, s = 0, e, i, gap, m, n = 0;

	for (k = 0; k < n_in; k++, s = e) {
		e = in[k];
		for (i = gap = s; i < e; ) {
			if ((m = fn(x, i, e)) == i) {
				i++;
				continue;
			}
			if (gap < i)
				out[n++] = i;
			out[n++] = m;
			i = gap = m;
		}
		if (gap < e)
			out[n++] = e;
	}
	return (n);
}

/* Split text into pre-tokenizer words; (*ends)[k] is the byte where word k ends. */
size_t
tok_pre_split(enum tok_pre pre, const char *s, size_t len, size_t **ends)
{
	const match_fn	*passes = rules[pre];
	struct cps	 x;
	uint32_t	*a, *b, *t;
	size_t		 n = 0, p, k;

	cps_build(&x, (const unsigned char *)s, len);
	a = xreallocarray(NULL, x.n + 1, sizeof *a);
	b = xreallocarray(NULL, x.n + 1, sizeof *b);
	if (x.n > 0)
		a[n++] = x.n;
	for (p = 0; p < PASSES_MAX && passes[p] != NULL; p++) {
		n = pass(&x, passes[p], a, n, b);
		t = a, a = b, b = t;
	}
	*ends = xreallocarray(NULL, n ? n : 1, sizeof **ends);
	for (k = 0; k < n; k++)
		(*ends)[k] = x.off[a[k]];
	free(a);
	free(b);
	cps_free(&x);
	return (n);
}

/* Names in tokenizer.ggml.pre, the rule each stands for, and its flags. */
static const struct tok_pre_name names[] = {
	{ "default", TOK_PRE_GPT2, 0 },
	{ "gpt-2", TOK_PRE_GPT2, 0 },
	{ "gpt2", TOK_PRE_GPT2, 0 },
	{ "mpt", TOK_PRE_GPT2, 0 },
	{ "olmo", TOK_PRE_GPT2, 0 },
	{ "phi-2", TOK_PRE_GPT2, 0 },
	{ "jais", TOK_PRE_GPT2, 0 },
	{ "trillion", TOK_PRE_GPT2, 0 },
	{ "granite-docling", TOK_PRE_GPT2, 0 },
	{ "exaone4", TOK_PRE_GPT2, 0 },
	{ "gigachat", TOK_PRE_GPT2, 0 },
	{ "a.x-4.0", TOK_PRE_GPT2, 0 },
	{ "mellum", TOK_PRE_GPT2, 0 },
	{ "llama-bpe", TOK_PRE_LLAMA3, TOK_PRE_WHOLE_WORDS | TOK_PRE_BOS },
	{ "llama3", TOK_PRE_LLAMA3, TOK_PRE_WHOLE_WORDS | TOK_PRE_BOS },
	{ "llama-v3", TOK_PRE_LLAMA3, TOK_PRE_WHOLE_WORDS | TOK_PRE_BOS },
	{ "falcon3", TOK_PRE_LLAMA3, TOK_PRE_WHOLE_WORDS | TOK_PRE_BOS },
	{ "falcon-h1", TOK_PRE_LLAMA3, TOK_PRE_WHOLE_WORDS | TOK_PRE_BOS },
	{ "pixtral", TOK_PRE_LLAMA3, TOK_PRE_WHOLE_WORDS | TOK_PRE_BOS },
	{ "midm-2.0", TOK_PRE_LLAMA3, TOK_PRE_WHOLE_WORDS | TOK_PRE_BOS },
	{ "lfm2", TOK_PRE_LLAMA3, TOK_PRE_WHOLE_WORDS | TOK_PRE_BOS },
	{ "dbrx", TOK_PRE_LLAMA3, 0 },
	{ "smaug-bpe", TOK_PRE_LLAMA3, 0 },
	{ "glm4", TOK_PRE_LLAMA3, 0 },
	{ "chatglm-bpe", TOK_PRE_LLAMA3, 0 },
	{ "qwen2", TOK_PRE_QWEN2, 0 },
	{ "deepseek-r1-qwen", TOK_PRE_QWEN2, 0 },
	{ "kormo", TOK_PRE_QWEN2, 0 },
	{ "f2llmv2", TOK_PRE_QWEN2, 0 },
	{ "megrez", TOK_PRE_QWEN2, 0 },
	{ "stablelm2", TOK_PRE_QWEN2, 0 },
	{ "hunyuan", TOK_PRE_QWEN2, 0 },
	{ "solar-open", TOK_PRE_QWEN2, 0 },
	{ "grok-2", TOK_PRE_QWEN2, 0 },
	{ "bailingmoe", TOK_PRE_QWEN2, 0 },
	{ "bailingmoe2", TOK_PRE_QWEN2, 0 },
	{ "llada-moe", TOK_PRE_QWEN2, 0 },
	{ "seed-coder", TOK_PRE_SEED_CODER, 0 },
	{ "minicpm5", TOK_PRE_MINICPM5, TOK_PRE_WHOLE_WORDS },
	{ "qwen35", TOK_PRE_QWEN35, 0 },
	{ "deepseek-llm", TOK_PRE_DEEPSEEK_LLM, 0 },
	{ "deepseek-coder", TOK_PRE_DEEPSEEK_CODER, 0 },
	{ "deepseek-v3", TOK_PRE_DEEPSEEK3, 0 },
	{ "hunyuan-dense", TOK_PRE_DEEPSEEK3, 0 },
	{ "joyai-llm", TOK_PRE_DEEPSEEK3, 0 },
	{ "falcon", TOK_PRE_FALCON, 0 },
	{ "starcoder", TOK_PRE_STARCODER, 0 },
	{ "refact", TOK_PRE_STARCODER, 0 },
	{ "command-r", TOK_PRE_STARCODER, 0 },
	{ "smollm", TOK_PRE_STARCODER, 0 },
	{ "codeshell", TOK_PRE_STARCODER, 0 },
	{ "exaone", TOK_PRE_STARCODER, 0 },
	{ "minerva-7b", TOK_PRE_STARCODER, 0 },
	{ "mellum2", TOK_PRE_STARCODER, 0 },
	{ "tekken", TOK_PRE_TEKKEN, TOK_PRE_WHOLE_WORDS | TOK_PRE_BOS },
	{ "gpt-4o", TOK_PRE_GPT4O, 0 },
	{ "llama4", TOK_PRE_GPT4O, 0 },
	{ "kanana2", TOK_PRE_GPT4O, 0 },
	{ "talkie", TOK_PRE_GPT4O, 0 },
	{ "minimax-m2", TOK_PRE_GPT4O, 0 },
	{ "bloom", TOK_PRE_BLOOM, 0 },
	{ "poro-chat", TOK_PRE_BLOOM, 0 },
	{ "gpt3-finnish", TOK_PRE_BLOOM, 0 },
	{ "viking", TOK_PRE_VIKING, 0 },
};

/* Look up a pre-tokenizer by its name in tokenizer.ggml.pre; NULL if unknown. */
const struct tok_pre_name *
tok_pre_find(const char *name)
{
	size_t	i;

	for (i = 0; i < NRANGES(names); i++) {
		if (strcmp(names[i].name, name) == 0)
			return (&names[i]);
	}
	return (NULL);
}
