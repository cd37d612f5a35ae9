"""Reads every message of the named JetStream streams with an independent client (nats-py),
as the controller's NKey user over the bus's TLS, and writes each stream's subjects, headers and
payloads, as they are stored, to OUT/<stream> (and each payload to OUT/<stream>.d/<seq>): what a byte search of the bus then looks at.

Usage: read_streams.py URL CA_FILE SEED_FILE OUT STREAM...
"""

import asyncio
import os
import ssl
import sys

import nats
from nats.js.errors import NotFoundError


async def main(url, ca_file, seed_file, out, streams):
    tls = ssl.create_default_context(cafile=ca_file)
    nc = await nats.connect(servers=url.split(","), tls=tls, nkeys_seed=seed_file,
                            allow_reconnect=False, connect_timeout=10)
    try:
        js = nc.jetstream()
        for stream in streams:
            info = await js.stream_info(stream)
            count = 0
            each = os.path.join(out, stream + ".d")
            os.makedirs(each, exist_ok=True)
            with open(os.path.join(out, stream), "wb") as f:
                # A stream never written holds no message 0: its first is 1 at least.
                for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
                    try:
                        msg = await js.get_msg(stream, seq)
                    except NotFoundError:
                        continue  # deleted or replaced: not kept
                    f.write(msg.subject.encode() + b"\n")
                    for key, value in (msg.headers or {}).items():
                        f.write(f"{key}: {value}\n".encode())
                    f.write(msg.data or b"")
                    with open(os.path.join(each, str(seq)), "wb") as one:
                        one.write(msg.data or b"")
                    f.write(b"\n")
                    count += 1
            print(f"{stream} {count}")
    finally:
        await nc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]))
