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

SEPARATORS = frozenset(b" \t\r\n,")


def _spans(body: bytes, args: ExtenderArgs) -> list[tuple[int, int]]:
    """Where each Node object lies in the body. Items are in body order: the first is
    found by its text, each next one begins after the separators (commas, JSON whitespace)
    that follow the one before (the body was validated as JSON: nothing else can come
    between two items of the array); its first and last bytes are checked."""
    spans: list[tuple[int, int]] = []
    position = -1
    for raw in args.raw_nodes or []:
        text = memoryview(raw)
        size = len(text)
        if position < 0:
            position = body.find(text)
        else:
            while body[position] in SEPARATORS:
                position += 1
            if body[position] != text[0] or body[position + size - 1] != text[-1]:
                position = body.find(text, position)  # never for valid JSON: search
        spans.append((position, position + size))
        position += size
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
