"""What a code generation target is: data (the annotation of each hardware level, the
data region, the device allocator, the compiler flags) plus an optional lowering hook
(C IR -> C IR).  Plans emit levels; the C lowering asks the target how to spell them;
codegen, build and the CLI never test a target's name."""
from __future__ import annotations

from dataclasses import dataclass



@dataclass(frozen=True, slots=True)
class Target:
    name: str
    description: str
    cflags: tuple                 # host-build flags that select the programming model
    gang: str | None = None       # outermost parallel loop of a kernel; {collapse} {clauses}
    vector: str | None = None     # a lane loop
    vector_reduce: str | None = None   # a lane loop with a reduction; {op} {vars}
    seq: str | None = None        # a sequential loop inside a parallel region
    serial: str | None = None     # a single-threaded region; {clauses}
    data_clause: str | None = None     # how a kernel names the (device) arrays it touches
    device_entry: bool = False    # the kernels take device pointers; a host entry moves the data
    helper_prefix: str | None = None   # a line before every helper function (device routines)
    model_macro: str | None = None     # defined when the model is enabled (#ifdef in the C file)
    header: str | None = None          # the model's header, included under model_macro
    device_malloc: str | None = None   # device allocator and deallocator (under model_macro)
    device_free: str | None = None
    on_device: str | None = None       # a C condition: a device (not the host) runs the kernels
    copy_to_device: str | None = None  # (device, host, bytes) and back: the host entry's copies
    copy_from_device: str | None = None
    host_only_flags: tuple = ()        # added to host builds (e.g. disabling offload)
    offload: dict | None = None        # offload name -> full flag list for a device build
    vector_length: int = 32
    prefetch: str | None = None        # a prefetch hint for the address {addr} (Schedule Prefetch statements)
    lanes: str = "threads"             # a vector lane: a thread of a warp that runs its own loops (GPUs), or
                                       # "simd", a slot of a SIMD register: lane loops go innermost (CPUs)
    lower: object = None               # optional C IR -> C IR hook: (kernels, C names of the arrays of floats) ->
                                       # (kernels, names of the optional helpers (codegen.OPTIONAL_HELPERS) they call)
    printer: str = "c"                 # which printer writes its source (moac.driver.PRINTERS)
    compiler: str = "gcc"              # the compiler of its builds
    base_flags: tuple = ("-O3", "-std=gnu11", "-fPIC", "-shared")   # every host build's
    werror_flags: tuple = ("-Wall", "-Werror")                      # warnings are errors
    native_flags: tuple = ()           # added to in-process (JIT) host builds: code for this machine's CPU
    c_calls: tuple = ()                # (C function, helper) pairs: the kernels call the helper instead
                                       # (codegen.OPTIONAL_HELPERS), e.g. an inline fmaxf where the libm one is a call
    suffix: str = ".c"                 # its source files' suffix
    runtime_libs: tuple = ()           # shared libraries a device bundle carries (found by gcc)
    stream: bool = False               # the device entry takes a stream after its workspace
    gangs: int = 16384                 # about how many gangs the split-K chunk choice aims for
    gangs_per_block: int = 1           # cuda: warps of a block, each running its own gang iteration
    gang_memory: bool = False          # buffers placed "gang" live in on-chip memory of the gang's block
    tensor_tiles: bool = False         # it prints a TensorTile's tile instructions (mma.sync, bf16 operands);
                                       # without, a gang runs the tile's lane passes
    last_gang: bool = False            # it prints a LastGang (an atomic counter per frame, memory fences): the
                                       # last gang of a frame folds its partials, no separate combine kernel
    tile_min_chunk: int = 0            # the fewest tokens per chunk where a kernel has tiles (0: MIN_CHUNK)
    tile_gangs: int = 0                # the gang count the chunk choice aims for where a kernel has tiles
                                       # whose chunks all hold the same tokens (fewer where tile_wave_bytes
                                       # says so), twice it where they do not (0: `gangs`)
    tile_wave_bytes: int = 0           # even tile chunks: at most this many bytes of tile steps at a time,
                                       # tile_wave_bytes ÷ a step's bytes gangs (0: no such bound)
    tile_max_chunk: int = 0            # the most tokens per chunk where a kernel has tiles (0: CHUNK)
    scan_gangs: bool = False           # a gang may find its work by a short scan (a ragged batch's chunks
                                       # enumerated densely, plans/split_k._dense_chunks): cheap on CUDA
                                       # blocks; GCC's OpenACC ran the ragged kernel at 54 % of the dense
                                       # one with it, 67 % without (H200); host threads split gangs statically

    def chunk_floor(self, tiled: bool) -> int:
        """The fewest tokens per split-K chunk (`tiled`: the schedule has tensor-core tiles,
        which this target prints)."""
        from ..schedule.choices import MIN_CHUNK       # (moac.schedule imports the targets)
        return self.tile_min_chunk if tiled and self.tensor_tiles and self.tile_min_chunk else MIN_CHUNK

    def chunk_ceiling(self, tiled: bool) -> int:
        """The most tokens per split-K chunk (`tiled`: as for chunk_floor)."""
        from ..schedule.choices import CHUNK
        return self.tile_max_chunk if tiled and self.tensor_tiles and self.tile_max_chunk else CHUNK

    def gang_target(self, tiled: bool, even: bool = True, step_bytes: int = 0, warps: int = 1) -> int:
        """About how many gangs the split-K chunk choice aims for (`tiled`: the schedule has
        tensor-core tiles, which this target prints; `even`: their chunks all hold the same
        tokens, Schedule.even_tiles; `step_bytes`: the K and V bytes a gang reads at a time,
        a step of each of its `warps` warps).  Tile kernels aim for `tile_gangs` (about one
        wave), or fewer where `tile_wave_bytes` of steps at a time ask for fewer, longer
        streams, where their chunks are even; where a ragged batch's lengths make them uneven,
        twice `tile_gangs` warps (the later waves balance the first) and no fewer than
        `tile_gangs` gangs (a gang's warps split its chunk, not the batch); other kernels for
        `gangs`."""
        if not (tiled and self.tensor_tiles and self.tile_gangs):
            return self.gangs
        if not even:
            return max(self.tile_gangs, 2 * self.tile_gangs // warps)
        if self.tile_wave_bytes and step_bytes:
            return min(self.tile_gangs, self.tile_wave_bytes // step_bytes)
        return self.tile_gangs

    def chunk_choice(self, tiled: bool, even: bool = True, step_bytes: int = 0, warps: int = 1) -> tuple:
        """(gangs, fewest, most tokens a chunk): what the split-K chunk choice of a schedule's
        kernels takes from this target (moac.schedule.choices.chunk_size, codegen.chunk_helper)."""
        return self.gang_target(tiled, even, step_bytes, warps), self.chunk_floor(tiled), self.chunk_ceiling(tiled)

    def gang_pragma(self, collapse: int, arrays: tuple) -> str | None:
        if self.gang is None:
            return None
        col = f" collapse({collapse})" if collapse > 1 else ""
        return self.gang.format(collapse=col, clauses=self._clauses(arrays)).rstrip()

    def vector_pragma(self, reduce: tuple = ()) -> str | None:
        if not reduce:
            return self.vector
        if self.vector_reduce is None:
            return None
        (op, names), = reduce
        from ..ops import OPS          # here: a target is data, loaded before the compiler
        return self.vector_reduce.format(op=OPS[op].acc_clause, vars=", ".join(names))

    def serial_pragma(self, arrays: tuple) -> str | None:
        return None if self.serial is None else self.serial.format(clauses=self._clauses(arrays)).rstrip()

    def _clauses(self, arrays: tuple) -> str:
        return f"{self.data_clause}({', '.join(arrays)})" if self.data_clause and arrays else ""

    def flags(self, offload: str = "none") -> list | None:
        """The compiler flags of a host build, or of a device build for `offload` (None
        where the target has no such build)."""
        if offload == "none":
            return list(self.cflags) + list(self.host_only_flags)
        if not self.offload or offload not in self.offload:
            return None
        return list(self.offload[offload])
