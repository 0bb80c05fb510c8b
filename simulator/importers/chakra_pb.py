"""Chakra execution-trace messages (ASTRA-sim's workload format) without the chakra package.

The classes are built at import time from a descriptor written out here, from the published
``schema/protobuf/et_def.proto`` (package ``ChakraProtoMsg``; mlcommons/chakra): the
messages a trace file holds (``GlobalMetadata``, ``Node``, ``AttributeProto`` with its list
types, ``IOInfo``) and the ``NodeType`` and ``CollectiveCommType`` enums, with the field
numbers of that file (a test checks them). The storage messages of the schema are left out:
nothing here reads or writes them, and protobuf skips unknown fields when decoding.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
PKG = "ChakraProtoMsg"
ONE, REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# scalar type of each AttributeProto value, in field-number order from 3 (x_val, x_list)
ATTR_TYPES = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
              "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes")
NODE_TYPES = ("INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE",
              "COMP_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE",
              "STORAGE_NODE", "BATCH_NODE", "CHECKPOINT_NODE")
COLLECTIVE_TYPES = ("ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST",
                    "ALL_TO_ALL", "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER")
# message -> [(field, number, type, label, message or enum type)]
NODE_FIELDS = [("id", 1, "uint64", ONE, ""), ("name", 2, "string", ONE, ""),
               ("type", 3, "enum", ONE, "NodeType"), ("ctrl_deps", 4, "uint64", REP, ""),
               ("data_deps", 5, "uint64", REP, ""), ("start_time_micros", 6, "uint64", ONE, ""),
               ("duration_micros", 7, "uint64", ONE, ""), ("inputs", 8, "message", ONE, "IOInfo"),
               ("outputs", 9, "message", ONE, "IOInfo"),
               ("attr", 10, "message", REP, "AttributeProto")]
SCHEMA = {
    "GlobalMetadata": [("version", 1, "string", ONE, ""),
                       ("attr", 2, "message", REP, "AttributeProto")],
    "Node": NODE_FIELDS,
    "IOInfo": [("values", 1, "string", ONE, ""), ("shapes", 2, "string", ONE, ""),
               ("types", 3, "string", ONE, "")],
    "AttributeProto": [("name", 1, "string", ONE, ""), ("doc_string", 2, "string", ONE, "")]
    + [f for i, t in enumerate(ATTR_TYPES) for f in (
        (f"{t}_val", 3 + 2 * i, t, ONE, ""),
        (f"{t}_list", 4 + 2 * i, "message", ONE, f"{t.capitalize()}List"))],
    **{f"{t.capitalize()}List": [("values", 1, t, REP, "")] for t in ATTR_TYPES},
}
ENUMS = {"NodeType": NODE_TYPES, "CollectiveCommType": COLLECTIVE_TYPES}


def _type(name: str) -> int:
    return getattr(_F, f"TYPE_{name.upper()}")


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="clustersim_chakra_et_def.proto",
                                            package=PKG, syntax="proto3")
    for name, values in ENUMS.items():
        enum = fd.enum_type.add(name=name)
        for number, value in enumerate(values):
            enum.value.add(name=value, number=number)
    for name, fields in SCHEMA.items():
        msg = fd.message_type.add(name=name)
        if name == "AttributeProto":
            msg.oneof_decl.add(name="value")
        for field, number, ftype, label, type_name in fields:
            f = msg.field.add(name=field, number=number, type=_type(ftype), label=label)
            if type_name:
                f.type_name = f".{PKG}.{type_name}"
            if name == "AttributeProto" and number > 2:
                f.oneof_index = 0
    return fd


def message_classes() -> dict:
    """Message classes by name (``Node``, ``GlobalMetadata``, ``AttributeProto``...)."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    make = getattr(message_factory, "GetMessageClass", None) or \
        message_factory.MessageFactory(pool).GetPrototype          # protobuf < 4.22
    return {n: make(pool.FindMessageTypeByName(f"{PKG}.{n}")) for n in SCHEMA}


MESSAGES = message_classes()
NODE, METADATA, ATTR = MESSAGES["Node"], MESSAGES["GlobalMetadata"], MESSAGES["AttributeProto"]
FILE_DESCRIPTOR = NODE.DESCRIPTOR.file

__all__ = ["ATTR", "COLLECTIVE_TYPES", "FILE_DESCRIPTOR", "METADATA", "NODE", "NODE_TYPES"]
