/* unicode_tables.h: character classes for the GPT-2 pre-tokenizer regex.
 *
 * Generated data (unicode_tables.c, by scripts/gen_unicode_tables.py from Python's
 * unicodedata, Unicode 14.0.0); this header is generated too.
 * unicode_class(cp) returns one of UC_OTHER, UC_LETTER (general category L*), UC_NUMBER
 * (N*), UC_SPACE (the White_Space property, i.e. regex \s) for any cp < 0x110000.
 *
 * Deliberately not here: UTF-8 decoding (tokenizer.c does it) and any other property. */
#ifndef BT_UNICODE_TABLES_H
#define BT_UNICODE_TABLES_H

#include <stdint.h>

enum { UC_OTHER = 0, UC_LETTER = 1, UC_NUMBER = 2, UC_SPACE = 3 };

#define UNICODE_CLASS_SHIFT 7
#define UNICODE_CLASS_MASK 127

extern const char unicode_tables_version[];
extern const uint16_t unicode_class_stage1[8704]; /* (0x110000 >> SHIFT) */
extern const uint8_t unicode_class_stage2[25216];   /* (blocks << SHIFT) */

/* cp must be < 0x110000 (callers decode UTF-8 first). */
static inline int unicode_class(uint32_t cp) {
    return unicode_class_stage2[((uint32_t)unicode_class_stage1[cp >> UNICODE_CLASS_SHIFT]
                                 << UNICODE_CLASS_SHIFT) | (cp & UNICODE_CLASS_MASK)];
}

#endif
