/* tensorboard.h: a writer of TensorBoard event files (scalars and text), so that
 * `tensorboard --logdir OUTPUT_DIR` shows bt's training curves beside the reference runs'.
 *
 * File: "<dir>/events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>" (TensorBoard
 * picks up every file whose name holds "tfevents"; the pid keeps two runs started in the same
 * second apart). It is a TFRecord stream; each record is
 *     uint64 length (little-endian) | uint32 masked_crc32c(those 8 bytes)
 *     | data[length] | uint32 masked_crc32c(data)
 * with masked_crc(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 and CRC32C the Castagnoli CRC
 * (reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF). Each data block is one
 * tensorflow.Event protobuf (tensorflow/core/util/event.proto), encoded here by hand:
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *               Summary summary = 5; SessionLog session_log = 7; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
 *               SummaryMetadata metadata = 9; }   (tensor and metadata: text only)
 *     SessionLog { SessionStatus status = 1; }   (START = 1)
 * The first record is Event{wall_time, file_version: "brain.Event:2"}. A resumed run writes a
 * SessionLog START at its first step: TensorBoard then discards the events of the killed run
 * whose step is >= that step (its "purge orphaned data" rule), so the curves do not fork.
 *
 * Every add is written and fflush'ed at once (a killed run loses nothing it logged).
 * Tags follow the Hugging Face Trainer's TensorBoard callback: "train/loss",
 * "train/learning_rate", "train/grad_norm", "eval/loss", ... (the caller picks them).
 *
 * Deliberately not here: histograms, images, graphs, hparams plugins, the TF
 * "global step" bookkeeping, reading event files (tests/tb_reader.c does that independently),
 * and any protobuf library (the three messages above are all bt writes). */
#ifndef BT_TRAIN_TENSORBOARD_H
#define BT_TRAIN_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"

typedef struct bt_tb_writer {
    FILE *f;
    char path[4096]; /* the event file */
} bt_tb_writer;

/* Creates a new event file in dir (which must exist) and writes the file_version event with
 * wall_time. When resume_step > 0 it also writes SessionLog START at step resume_step + 1
 * (the first step of the resumed run). Errors: BT_ERR_IO naming the path. */
bt_status bt_tb_open(bt_tb_writer *w, const char *dir, double wall_time, int64_t resume_step);

/* One scalar: Event{wall_time, step, summary{value{tag, simple_value = (float)value}}}.
 * Errors: BT_ERR_IO naming the file (the writer then stays usable, the record may be cut;
 * TensorBoard stops at a bad record, so callers should report it and close). */
bt_status bt_tb_add_scalar(bt_tb_writer *w, const char *tag, int64_t step, double value,
                           double wall_time);

/* One text (TensorBoard's text plugin, as torch's SummaryWriter.add_text writes it):
 * Event{wall_time, step, summary{value{tag, tensor{dtype DT_STRING = 7, tensor_shape{dim{size
 * 1}}, string_val = text}, metadata{plugin_data{plugin_name "text"}}}}}. HF's TensorBoard
 * callback writes its args this way under the tag "args/text_summary"; TensorBoard renders the
 * text as Markdown. Errors as bt_tb_add_scalar; BT_ERR_NOMEM. */
bt_status bt_tb_add_text(bt_tb_writer *w, const char *tag, int64_t step, const char *text,
                         double wall_time);

/* Closes the file (nothing to do when never opened). Errors: BT_ERR_IO on a failed close. */
bt_status bt_tb_close(bt_tb_writer *w);

/* CRC32C (Castagnoli) of n bytes, the standard check value: bt_crc32c("123456789", 9) ==
 * 0xE3069283. Table-driven (one 256-entry table, bytewise). */
uint32_t bt_crc32c(const void *data, size_t n);
/* The TFRecord mask of a CRC (see above). */
uint32_t bt_tb_masked_crc(uint32_t crc);

#endif
