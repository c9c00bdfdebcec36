"""The decode worker process (see ``extender.http.offload``): reads framed bodies on stdin,
answers each with a length-prefixed msgpack reply on stdout. Imports only the protocol."""

from __future__ import annotations

import sys

import msgspec

from extender.errors import InvalidRequest
from extender.http.offload import HEADER, REPLY_SIZE, WireExtenderArgs, WorkerReply
from extender.protocol import (
    BindingArgs,
    ExtenderArgs,
    NodeLite,
    ObjectMeta,
    PreemptionArgs,
    decode_verb,
)


def _spans(body: bytes, args: ExtenderArgs) -> list[tuple[int, int]]:
    spans, position = [], 0
    for raw in args.raw_nodes or []:
        text = bytes(raw)
        start = body.find(text, position)  # items are in body order: found where it begins
        position = start + len(text)
        spans.append((start, position))
    return spans


def handle(verb: str, body: bytes, keep_annotations: bool) -> WorkerReply:
    try:
        args = decode_verb(verb, body)
    except InvalidRequest as exc:
        return WorkerReply(error=str(exc))
    if isinstance(args, BindingArgs):
        return WorkerReply(binding=args)
    if isinstance(args, PreemptionArgs):
        return WorkerReply(preemption=args)
    spans = None
    if args.raw_nodes is not None:
        spans = _spans(body, args)
        if not keep_annotations:  # names are all the scheduler-facing path needs
            args.nodes = [NodeLite(metadata=ObjectMeta(name=n.metadata.name), status=n.status)
                          for n in args.nodes or []]
    args.raw_nodes = None
    return WorkerReply(extender=WireExtenderArgs(args=args, spans=spans))


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    encoder = msgspec.msgpack.Encoder()
    while True:
        header = stdin.read(HEADER.size)
        if len(header) < HEADER.size:
            return  # the extender closed the pipe
        verb, keep, size = HEADER.unpack(header)
        body = stdin.read(size)
        reply = encoder.encode(handle(verb.rstrip(b"\0").decode(), body, bool(keep)))
        stdout.write(REPLY_SIZE.pack(len(reply)) + reply)
        stdout.flush()


if __name__ == "__main__":
    main()
