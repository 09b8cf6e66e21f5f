/* cmd_tokenize.h: phasectl tokenize, which runs without the daemon. */
#ifndef PHASECTL_CMD_TOKENIZE_H
#define PHASECTL_CMD_TOKENIZE_H

/*
 * phasectl tokenize -m FILE.gguf [--bos] [--special] TEXT
 * argv holds the arguments after the command word.  Returns 0, 2 for a
 * usage error, 1 when the file or the text cannot be tokenized.
 */
int	cmd_tokenize(int argc, char **argv, int json);

#endif
