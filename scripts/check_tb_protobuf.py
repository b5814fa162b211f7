#!/usr/bin/python3
"""check_tb_protobuf.py: reads bt's TensorBoard event files with Google's protobuf runtime
(Debian's python3-protobuf), a third reader beside tests/tb_reader.c and TensorBoard itself.

    /usr/bin/python3 scripts/check_tb_protobuf.py OUTPUT_DIR_OR_EVENT_FILE...

The messages are declared here from the published .proto files (tensorflow/core/util/
event.proto and tensorflow/core/framework/summary.proto: the field numbers and types of the
fields bt writes), built at run time with descriptor_pb2 (no protoc, no TensorFlow). The
TFRecord framing is checked with a bitwise CRC32C written here. Every record must parse
with no unknown fields; prints "STEP TAG VALUE" per scalar and exits 1 on any problem.

Not in the default test suite (python3-protobuf is not a build or test dependency):
    apt-get install python3-protobuf
"""
import glob
import os
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="bt_check_event.proto", package="tensorflow",
                                            syntax="proto3")

    def msg(name, fields):
        m = fd.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
        return m

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    # summary.proto: Summary.Value {string node_name = 7; string tag = 1; float simple_value = 2; ...}
    summary = msg("Summary", [("value", 1, F.TYPE_MESSAGE, rep, ".tensorflow.Summary.Value")])
    value = summary.nested_type.add(name="Value")
    for fname, number, ftype in [("tag", 1, F.TYPE_STRING), ("simple_value", 2, F.TYPE_FLOAT),
                                 ("node_name", 7, F.TYPE_STRING)]:
        value.field.add(name=fname, number=number, type=ftype, label=opt)
    # text (TensorBoard's text plugin): Value {TensorProto tensor = 8; SummaryMetadata metadata = 9;}
    value.field.add(name="tensor", number=8, type=F.TYPE_MESSAGE, label=opt,
                    type_name=".tensorflow.TensorProto")
    value.field.add(name="metadata", number=9, type=F.TYPE_MESSAGE, label=opt,
                    type_name=".tensorflow.SummaryMetadata")
    # tensor.proto: TensorProto {DataType dtype = 1; TensorShapeProto tensor_shape = 2;
    #   repeated bytes string_val = 8;}; tensor_shape.proto: {repeated Dim dim = 2;} Dim {int64 size = 1;}
    shape = msg("TensorShapeProto", [("dim", 2, F.TYPE_MESSAGE, rep, ".tensorflow.TensorShapeProto.Dim")])
    shape.nested_type.add(name="Dim").field.add(name="size", number=1, type=F.TYPE_INT64, label=opt)
    msg("TensorProto", [("dtype", 1, F.TYPE_INT32, opt, None),
                        ("tensor_shape", 2, F.TYPE_MESSAGE, opt, ".tensorflow.TensorShapeProto"),
                        ("string_val", 8, F.TYPE_BYTES, rep, None)])
    # summary.proto: SummaryMetadata {PluginData plugin_data = 1;} PluginData {string plugin_name = 1;
    #   bytes content = 2;}
    meta = msg("SummaryMetadata", [("plugin_data", 1, F.TYPE_MESSAGE, opt,
                                    ".tensorflow.SummaryMetadata.PluginData")])
    pd = meta.nested_type.add(name="PluginData")
    pd.field.add(name="plugin_name", number=1, type=F.TYPE_STRING, label=opt)
    pd.field.add(name="content", number=2, type=F.TYPE_BYTES, label=opt)
    # event.proto: SessionLog {SessionStatus status = 1; string checkpoint_path = 2; string msg = 3;}
    session_log = msg("SessionLog", [("status", 1, F.TYPE_ENUM, opt, ".tensorflow.SessionLog.SessionStatus"),
                                     ("checkpoint_path", 2, F.TYPE_STRING, opt, None),
                                     ("msg", 3, F.TYPE_STRING, opt, None)])
    status = session_log.enum_type.add(name="SessionStatus")
    for i, n in enumerate(["STATUS_UNSPECIFIED", "START", "STOP", "CHECKPOINT"]):
        status.value.add(name=n, number=i)
    # event.proto: Event {double wall_time = 1; int64 step = 2; oneof what {string file_version = 3;
    #   bytes graph_def = 4; Summary summary = 5; ... SessionLog session_log = 7; ...}}
    msg("Event", [("wall_time", 1, F.TYPE_DOUBLE, opt, None), ("step", 2, F.TYPE_INT64, opt, None),
                  ("file_version", 3, F.TYPE_STRING, opt, None),
                  ("graph_def", 4, F.TYPE_BYTES, opt, None),
                  ("summary", 5, F.TYPE_MESSAGE, opt, ".tensorflow.Summary"),
                  ("session_log", 7, F.TYPE_MESSAGE, opt, ".tensorflow.SessionLog")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.MessageFactory(pool).GetPrototype(
        pool.FindMessageTypeByName("tensorflow.Event"))


def check_file(path, Event):
    data = open(path, "rb").read()
    off, rec, problems = 0, 0, 0
    while off < len(data):
        if off + 12 > len(data):
            print(f"{path}: record {rec} at offset {off}: truncated header")
            return problems + 1
        (length,) = struct.unpack_from("<Q", data, off)
        (lcrc,) = struct.unpack_from("<I", data, off + 8)
        if lcrc != masked(crc32c(data[off:off + 8])):
            print(f"{path}: record {rec} at offset {off}: length CRC mismatch")
            return problems + 1
        body = data[off + 12:off + 12 + length]
        if len(body) != length or off + 16 + length > len(data):
            print(f"{path}: record {rec} at offset {off}: truncated data")
            return problems + 1
        (dcrc,) = struct.unpack_from("<I", data, off + 12 + length)
        if dcrc != masked(crc32c(body)):
            print(f"{path}: record {rec} at offset {off}: data CRC mismatch")
            problems += 1
        ev = Event()
        ev.ParseFromString(body)
        if len(ev.UnknownFields()):
            print(f"{path}: record {rec}: fields unknown to event.proto")
            problems += 1
        if ev.HasField("summary"):
            for v in ev.summary.value:
                if v.HasField("tensor"):
                    ok = (v.metadata.plugin_data.plugin_name == "text" and v.tensor.dtype == 7
                          and len(v.tensor.string_val) == 1)
                    if not ok:
                        print(f"{path}: record {rec}: a tensor value that is not a text")
                        problems += 1
                    print(f"{ev.step} {v.tag} text of {len(v.tensor.string_val[0])} bytes")
                else:
                    print(f"{ev.step} {v.tag} {v.simple_value:.9g}")
        elif ev.HasField("session_log"):
            print(f"session_log {ev.session_log.status} at step {ev.step}")
        elif ev.file_version:
            print(f"file_version {ev.file_version} wall_time {ev.wall_time:.3f}")
        else:
            print(f"{path}: record {rec}: an Event with nothing bt writes")
            problems += 1
        off += 16 + length
        rec += 1
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    Event = event_class()
    files = []
    for a in argv[1:]:
        files += sorted(glob.glob(os.path.join(a, "events.out.tfevents.*"))) if os.path.isdir(a) else [a]
    if not files:
        print("no event files found")
        return 1
    problems = sum(check_file(f, Event) for f in files)
    print(f"{len(files)} file(s), {problems} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
