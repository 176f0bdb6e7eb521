def scan(
    data: bytes,
    start: int,
    end: int,
    marker: bytes,
    close: int,
    flags: int,
    table: bytes,
    seps: bytes,
    kinds: bytes,
    keys: tuple[bytes, ...],
    na: tuple[bytes, ...],
    truth: tuple[bytes, ...],
    /,
) -> tuple[bytearray, bytes, bytes, bytes]: ...
def count_lines(data: bytes, /) -> int: ...
