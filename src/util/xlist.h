/* X-macro word lists, X(ID, "word") (GMT_KINDS, GMT_VERDICTS...): the words
 * in list order, for an array indexed by the list's enum (whose values are in
 * the same order). */
#ifndef GMT_XLIST_H
#define GMT_XLIST_H

#define GMT_X_WORD(id, word) word,

/* The word of value v of a list of n, or `other` out of range. */
#define GMT_X_NAME(words, n, v, other) ((unsigned)(v) < (unsigned)(n) ? (words)[v] : (other))

#endif /* GMT_XLIST_H */
