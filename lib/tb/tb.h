/* lib/tb: TensorBoard event files, written by our own code (no TensorFlow, no protobuf library).
 *
 * The file format (TensorFlow's tensorflow/core/lib/io/record_writer.cc framing, read by
 * TensorBoard's event_file_loader): a sequence of records, each
 *     uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes |
 *     length bytes of data        | uint32 masked CRC32C of the data
 * where mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (32-bit arithmetic) and CRC32C is the
 * Castagnoli CRC (polynomial 0x1EDC6F41, reflected 0x82F63B78, initial and final xor 0xFFFFFFFF;
 * crc32c("123456789") = 0xE3069283).  Each record's data is one tensorflow.Event protocol buffer
 * (tensorflow/core/util/event.proto, tensorflow/core/framework/summary.proto), encoded by hand:
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
 *               SummaryMetadata metadata = 9; }
 * The first record is the Event with file_version "brain.Event:2" (what TensorFlow's and torch's
 * writers put there).  A scalar is a Value with simple_value (a float32: TensorBoard's own
 * precision); a text is a Value whose metadata names the plugin "text"
 * (SummaryMetadata.plugin_data.plugin_name = 1 of PluginData = 1) and whose tensor is a DT_STRING
 * (dtype = 1, value 7) of shape [1] (tensor_shape = 2, dim = 2, size = 1) holding the text in
 * string_val (8), as torch.utils.tensorboard's add_text writes it.
 *
 * The file is DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>.<prog> (n counts the
 * writers this process opened, from 0), TensorFlow's and torch's name with a suffix naming the
 * writing program; TensorBoard reads every file whose name contains "tfevents".  It is written in
 * place, not under a temporary name, because TensorBoard reads event files while they grow.
 * Records are kept in memory and written (one write(2) per batch) when mgt_tb_set_queue's count
 * of records is pending, when the oldest pending record is 120 seconds old (torch's flush_secs),
 * at mgt_tb_flush and at mgt_tb_close.  A writer is used by one thread at a time.
 */
#ifndef MGT_TB_H
#define MGT_TB_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

typedef struct mgt_tb mgt_tb;

/* Create DIR (mkdir -p, mode 0777 less the umask) and a new event file in it, named as above
 * (prog: the writing program, e.g. "mgt-train"; characters other than letters, digits, '-', '_'
 * and '.' become '_'), opened O_EXCL, and queue its file_version record (written at the first
 * flush).  The queue holds 1000 records (Megatron's --tensorboard-queue-size default).  *out
 * owns the writer: mgt_tb_close.  Errors: MGT_ERR_IO naming the directory or file and strerror
 * ("Not a directory", "Permission denied"), MGT_ERR_NOMEM. */
mgt_status mgt_tb_open(mgt_tb **out, const char *dir, const char *prog);

/* Records pending before they are written (>= 1; 1 writes each record at once). */
void mgt_tb_set_queue(mgt_tb *w, int64_t records);

/* The file's path (owned by the writer). */
const char *mgt_tb_path(const mgt_tb *w);

/* Queue one scalar: an Event at wall time now (seconds since the epoch, as a double) and the
 * given step, whose Summary has one Value {tag, simple_value = (float)value}.  NaN and inf are
 * written as they are.  Errors: MGT_ERR_IO when this or an earlier write of the file failed
 * ("PATH: write failed: STRERROR"; once failed, every later call returns the same error and
 * writes nothing), MGT_ERR_NOMEM. */
mgt_status mgt_tb_scalar(mgt_tb *w, const char *tag, double value, int64_t step);

/* Queue one text (UTF-8, any length) for the TensorBoard text plugin, as described above.
 * Errors: as mgt_tb_scalar. */
mgt_status mgt_tb_text(mgt_tb *w, const char *tag, const char *text, int64_t step);

/* Write the pending records.  Errors: MGT_ERR_IO ("PATH: write failed: STRERROR"). */
mgt_status mgt_tb_flush(mgt_tb *w);

/* Flush, close and free (NULL is accepted).  Returns the flush's or an earlier write's error,
 * or MGT_ERR_IO when close(2) fails; the writer is freed in every case. */
mgt_status mgt_tb_close(mgt_tb *w);

/* CRC32C (Castagnoli) of n bytes, continued from crc (0 to start), and TFRecord's mask of a CRC.
 * mgt_tb_crc32c(0, "123456789", 9) = 0xE3069283. */
uint32_t mgt_tb_crc32c(uint32_t crc, const void *p, size_t n);
uint32_t mgt_tb_mask(uint32_t crc);

#endif
