/* tb_reader.h: an independent reader of TensorBoard event files, for tests and for users who
 * want to look inside one without TensorFlow (`tb_read FILE` prints "step tag value" lines).
 *
 * Written from the published formats only, sharing no code with src/train/tensorboard.c:
 * - TFRecord framing: uint64 length (LE), uint32 masked CRC32C of the 8 length bytes, the
 *   data, uint32 masked CRC32C of the data; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
 *   Every CRC is verified; a cut or corrupt record is an error naming the record and offset.
 * - tensorflow.Event (tensorflow/core/util/event.proto): wall_time = 1 (double), step = 2
 *   (int64), file_version = 3 (string), summary = 5 (Summary), session_log = 7 (SessionLog);
 *   Summary.value = 1 (repeated Value); Value.tag = 1 (string), simple_value = 2 (float);
 *   SessionLog.status = 1 (enum, START = 1). Text (summary.proto, tensor.proto,
 *   tensor_shape.proto): Value.tensor = 8 (TensorProto: dtype = 1, DT_STRING = 7; string_val =
 *   8), Value.metadata = 9 (SummaryMetadata.plugin_data = 1, PluginData.plugin_name = 1,
 *   "text"). Other fields are skipped by wire type, as any protobuf parser does.
 * CRC32C here is the bitwise definition (one bit per iteration), not a table.
 *
 * Deliberately not here: histograms, images, tensors other than text (reported as
 * TBR_VALUE_OTHER), packed repeated fields, groups (wire types 3/4 are errors). */
#ifndef BT_TB_READER_H
#define BT_TB_READER_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TBR_FILE_VERSION, /* Event.file_version: text holds it */
    TBR_SCALAR,       /* one Summary.Value with simple_value: tag, value */
    TBR_TEXT,         /* a Summary.Value of the text plugin: tag, string (string_val[0]) */
    TBR_VALUE_OTHER,  /* a Summary.Value without simple_value nor text: tag */
    TBR_SESSION_LOG,  /* Event.session_log: status */
    TBR_EMPTY,        /* an Event with none of the above */
} tbr_kind;

typedef struct tbr_event {
    tbr_kind kind;
    double wall_time;
    int64_t step;
    char text[256]; /* file_version or tag (cut to 255 bytes) */
    float value;
    int status; /* SessionLog.status */
    char string[8192];  /* TBR_TEXT: the tensor's first string_val (cut to 8191 bytes) */
    size_t string_len;  /* its full length */
} tbr_event;

/* CRC32C computed bit by bit (reflected polynomial 0x82F63B78). */
uint32_t tbr_crc32c(const uint8_t *p, size_t n);

/* Reads every record of the file. On success returns 0 and a malloc'd array (*ev, *n; free
 * with free()). On error returns -1 with a message in err ("FILE: record 3 at offset 120:
 * data CRC mismatch (stored 0x..., computed 0x...)"). */
int tbr_read_file(const char *path, tbr_event **ev, size_t *n, char *err, size_t err_cap);

#endif
