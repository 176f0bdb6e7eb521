LANES: int
CHUNK: int
HAVE_AVX2: int

def fold(
    npu: object,
    npu_kind: int,
    bench: object,
    bench_kind: int,
    count: int,
    baseline: int = 0,
    /,
) -> tuple[tuple[float, ...], float, int, float, int, int] | None: ...
