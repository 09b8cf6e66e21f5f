/* tensor_type.c: the table of GGUF tensor types. */
#include "config.h"

#include <stddef.h>

#include "tensor_type.h"

static const struct tensor_type_info supported[TT_GGUF_MAX + 1] = {
	[TT_F32] = { "F32", 1, 4 },
	[TT_F16] = { "F16", 1, 2 },
	[TT_Q4_0] = { "Q4_0", 32, 18 },
	[TT_Q4_1] = { "Q4_1", 32, 20 },
	[TT_Q5_0] = { "Q5_0", 32, 22 },
	[TT_Q5_1] = { "Q5_1", 32, 24 },
	[TT_Q8_0] = { "Q8_0", 32, 34 },
	[TT_Q2_K] = { "Q2_K", 256, 84 },
	[TT_Q3_K] = { "Q3_K", 256, 110 },
	[TT_Q4_K] = { "Q4_K", 256, 144 },
	[TT_Q5_K] = { "Q5_K", 256, 176 },
	[TT_Q6_K] = { "Q6_K", 256, 210 },
	[TT_IQ4_NL] = { "IQ4_NL", 32, 18 },
	[TT_IQ4_XS] = { "IQ4_XS", 256, 136 },
	[TT_BF16] = { "BF16", 1, 2 },
};

/* GGUF names of every defined type number, supported or not. */
static const char *const names[TT_GGUF_MAX + 1] = {
	[0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1", [6] = "Q5_0",
	[7] = "Q5_1", [8] = "Q8_0", [9] = "Q8_1", [10] = "Q2_K", [11] = "Q3_K",
	[12] = "Q4_K", [13] = "Q5_K", [14] = "Q6_K", [15] = "Q8_K",
	[16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S",
	[20] = "IQ4_NL", [21] = "IQ3_S", [22] = "IQ2_S", [23] = "IQ4_XS",
	[24] = "I8", [25] = "I16", [26] = "I32", [27] = "I64", [28] = "F64",
	[29] = "IQ1_M", [30] = "BF16", [34] = "TQ1_0", [35] = "TQ2_0",
	[39] = "MXFP4",
};

/* Return the layout of a supported type, or NULL. */
const struct tensor_type_info *
tensor_type_get(uint32_t type)
{
	if (type > TT_GGUF_MAX || supported[type].name == NULL)
		return (NULL);
	return (&supported[type]);
}

/* Return the GGUF name of a type number, or NULL if GGUF defines none. */
const char *
tensor_type_name(uint32_t type)
{
	if (type > TT_GGUF_MAX)
		return (NULL);
	return (names[type]);
}
