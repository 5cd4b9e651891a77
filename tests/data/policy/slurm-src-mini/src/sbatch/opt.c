/* Trimmed from SchedMD/slurm slurm-26-05-3-1 src/sbatch/opt.c: get_argument(), verbatim. */

extern char *get_argument(const char *file, int lineno, const char *line,
			  int *skipped)
{
	const char *ptr;
	char *argument = NULL;
	char q_char = '\0';
	bool escape_flag = false;
	bool quoted = false;
	static bool logged = false;
	int i;

	ptr = line;
	*skipped = 0;

	/* skip whitespace */
	while (isspace(*ptr) && *ptr != '\0') {
		ptr++;
	}

	if (!xstrncasecmp(ptr, "packjob", 7) &&
	    ((ptr[7] == '\0') || (isspace(ptr[7])))) {
		if (!logged) {
			warning("The \"packjob\" component separator is deprecated. Please use \"hetjob\" instead.");
			logged = true;
		}
		memcpy((char *)ptr, "       ", 7);
	} else if (!xstrncasecmp(ptr, "hetjob", 6) &&
		   ((ptr[6] == '\0') || (isspace(ptr[6])))) {
		memcpy((char *)ptr, "      ", 6);
	}

	if (*ptr == ':') {
		fatal("%s: line %d: Unexpected `:` in [%s]",
		      file, lineno, line);
	}

	if (*ptr == '\0')
		return NULL;

	/* copy argument into "argument" buffer, */
	i = 0;
	while ((quoted || !isspace(*ptr)) && (*ptr != '\n') && (*ptr != '\0')) {
		if (escape_flag) {
			escape_flag = false;
		} else if (*ptr == '\\') {
			ptr++;
			if (*ptr == ' ') {
				if (!argument)
					argument = xmalloc(strlen(line) + 1);
				argument[i++] = *(ptr++);
				escape_flag = false;
			} else
				escape_flag = true;

			continue;
		} else if (quoted) {
			if (*ptr == q_char) {
				quoted = false;
				ptr++;
				continue;
			}
		} else if ((*ptr == '"') || (*ptr == '\'')) {
			quoted = true;
			q_char = *(ptr++);
			continue;
		} else if (*ptr == '#') {
			/* found an un-escaped #, rest of line is a comment */
			break;
		}

		if (!argument)
			argument = xmalloc(strlen(line) + 1);
		argument[i++] = *(ptr++);
	}

	if (quoted) {	/* Unmatched quote */
		fatal("%s: line %d: Unmatched `%c` in [%s]",
		      file, lineno, q_char, line);
	}

	*skipped = ptr - line;

	return argument;
}
