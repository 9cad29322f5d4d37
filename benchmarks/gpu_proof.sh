#!/usr/bin/env bash
# The communication image built from the package registries, on a real GPU (issue 42).
#
#   benchmarks/gpu_proof.sh pack [IMAGE]             on the machine with the engine
#   benchmarks/gpu_proof.sh run --sha256 HEX [OUTDIR]  on the GPU machine, from the repository root
#
# pack: copies out of IMAGE (default: the newest local image labelled with imagebuild's NCCL
#   benchmark, io.imagebuild.features ...nccl_bench=on) what it holds that a GPU host lacks: the
#   benchmark binary the image compiled (/usr/local/bin/imagebuild-nccl-bw) and the image's copies
#   of the system libraries it links (Debian's Open MPI among them; used on the GPU machine only
#   for a soname it lacks), into .gpu-proof/pack.tar.xz with a manifest inside. NVIDIA's libraries
#   stay behind (the image takes CUDA's run time and NCCL from NVIDIA's wheels; the host's serve
#   both builds alike). It prints the pack's sha256 and size and refuses more than 60 MiB (a device
#   call carries 64 MiB with the checkout).
# run: believes nothing that travels in the pack about the pack itself: the sha256 pack printed is
#   given on the command line (--sha256, or $IMAGEBUILD_GPU_PROOF_SHA256) and the archive is
#   refused unless its bytes hash to it. It is unpacked into a fresh private folder, never over a
#   system path. Then, against the host's driver, CUDA run time and NCCL: the image's binary and
#   the same benchmark built here from this checkout's source (imagebuild/smoke/bench/nccl_bw.c)
#   with the host's compiler, MPI, CUDA and NCCL headers, --version of each, all four collectives
#   with every element checked, all_reduce of both builds alternately, three rounds, compared by
#   benchmarks/gpu_proof/compare_nccl.py (target: the image's busbw at least 0.95 of the host
#   build's at 64 MiB and up), and the smoke suite's GPU tier with each binary. Everything goes to
#   OUTDIR (default $OUT, else ./gpu-proof-out): log.txt, summary.md, results.tsv. Exit 0 when every
#   check passed, 2 when it cannot run.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
PACK=${IMAGEBUILD_GPU_PROOF_DIR:-$ROOT/.gpu-proof}
BENCH=/usr/local/bin/imagebuild-nccl-bw
SOURCE=$ROOT/imagebuild/smoke/bench/nccl_bw.c
MAX_PACK_BYTES=$((60 * 1024 * 1024))

die() { echo "gpu_proof: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
pack() {
    command -v docker >/dev/null || die "docker: not found (pack runs where the engine is)"
    local image=${1:-}
    stage= cid=
    if [[ -z $image ]]; then
        image=$(docker images --format '{{.Repository}}:{{.Tag}}\t{{.Label "io.imagebuild.features"}}\t{{.Label "io.imagebuild.flavor"}}' \
                    | awk -F'\t' '$2 ~ /nccl_bench=on/ && $3 == "runtime" && $1 !~ /<none>/ {print $1; exit}')
        [[ -n $image ]] || die "no local image with imagebuild's NCCL benchmark (label io.imagebuild.features ...nccl_bench=on): build comms-cu130-nccl2.30.7-debian12-runtime, or name one"
    fi
    local id label version
    id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) || die "$image: no such image"
    label=$(docker image inspect -f '{{index .Config.Labels "io.imagebuild.image-id"}}' "$image")
    version=$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$image")
    [[ -n $label ]] || die "$image: not an imagebuild image (no io.imagebuild.image-id label)"

    stage=$(mktemp -d) || die "mktemp failed"  # global: the EXIT trap reads it
    trap 'rm -rf "$stage"; [[ -n ${cid:-} ]] && docker rm -f "$cid" >/dev/null 2>&1' EXIT
    cid=$(docker create --entrypoint /bin/true "$image") || die "docker create $image failed"
    mkdir -p "$stage/root/bin" "$stage/root/syslibs"
    docker cp -L "$cid:$BENCH" "$stage/root/bin/" || die "$image has no $BENCH"
    # the system libraries the benchmark links, from the image (a fallback on the GPU machine);
    # NVIDIA's (libcudart, libnccl) and the C library's stay behind
    local libs
    libs=$(docker run --rm --entrypoint /bin/bash -e IMAGEBUILD_CHECK=0 "$image" -c "ldd $BENCH" 2>/dev/null |
           awk '$2 == "=>" && $3 ~ /^\/(usr\/)?lib/ {print $3}' | sort -u) || die "ldd in $image failed"
    local lib base
    for lib in $libs; do
        base=$(basename "$lib")
        case $base in libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libcudart.so*|libnccl.so*) continue ;; esac
        docker cp -L "$cid:$lib" "$stage/root/syslibs/$base" || die "docker cp $lib failed"
    done
    docker rm -f "$cid" >/dev/null; cid=
    {
        echo "image $image"
        echo "image_id $id"
        echo "image_label $label"
        echo "image_version $version"
        echo "bench_sha256 $(sha256sum "$stage/root/bin/imagebuild-nccl-bw" | cut -d' ' -f1)"
        echo "syslibs $(ls "$stage/root/syslibs" | tr '\n' ' ')"
        echo "unpacked_bytes $(du -sb "$stage/root" | cut -f1)"
    } > "$stage/root/MANIFEST"

    mkdir -p "$PACK"
    rm -f "$PACK/pack.tar.xz" "$PACK/pack.tar.xz.part"
    tar -C "$stage/root" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - MANIFEST bin syslibs \
        | xz -T0 -6 > "$PACK/pack.tar.xz.part" || die "tar | xz failed"
    mv "$PACK/pack.tar.xz.part" "$PACK/pack.tar.xz"
    local packed sum
    packed=$(stat -c %s "$PACK/pack.tar.xz")
    sum=$(sha256sum "$PACK/pack.tar.xz" | cut -d' ' -f1)
    cat "$stage/root/MANIFEST"
    echo "packed_bytes $packed"
    echo "pack_sha256 $sum"
    if (( packed > MAX_PACK_BYTES )); then
        die "pack.tar.xz is $packed bytes, over the $MAX_PACK_BYTES a device call can carry with the checkout"
    fi
    echo "carry .gpu-proof and run: bash benchmarks/gpu_proof.sh run --sha256 $sum"
}

# ---------------------------------------------------------------------------------------------
OUTDIR= LOG= FAILS=0
note() { echo "$*" | tee -a "$LOG"; }
result() {  # name pass|fail|info text
    printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$OUTDIR/results.tsv"
    note "== $1: $2: $3"
    [[ $2 == fail ]] && FAILS=$((FAILS + 1))
    return 0
}
step() {  # seconds name command...: runs it, output to the log and to $OUTDIR/NAME.txt
    local secs=$1 name=$2; shift 2
    note "\$ $*"
    local t0=$SECONDS rc
    timeout --kill-after=10 "$secs" "$@" > "$OUTDIR/$name.txt" 2>&1
    rc=$?
    cat "$OUTDIR/$name.txt" >> "$LOG"
    note "(exit $rc, $((SECONDS - t0)) s)"
    return $rc
}

find_cuda_home() {
    local nvcc
    nvcc=$(command -v nvcc || ls -d /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | head -n 1)
    [[ -n $nvcc ]] && dirname "$(dirname "$(readlink -f "$nvcc")")"
}

find_nccl_home() {  # a folder with include/nccl.h and lib/libnccl.so.2: $IMAGEBUILD_NCCL_HOME, else the
                    # host's PyTorch wheel's, else the system's
    if [[ -n ${IMAGEBUILD_NCCL_HOME:-} ]]; then echo "$IMAGEBUILD_NCCL_HOME"; return; fi
    local py
    py=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    if [[ -n $py && -e $py/lib/libnccl.so.2 && -e $py/include/nccl.h ]]; then echo "$py"; return; fi
    if [[ -e /usr/include/nccl.h ]]; then
        local so
        so=$(ldconfig -p | awk '/libnccl\.so\.2 / {print $NF; exit}')
        [[ -n $so ]] && { mkdir -p "$WORK/system-nccl/lib"
                          ln -sf /usr/include "$WORK/system-nccl/include"
                          ln -sf "$so" "$WORK/system-nccl/lib/libnccl.so.2"
                          echo "$WORK/system-nccl"; }
    fi
}

run() {
    local want=${IMAGEBUILD_GPU_PROOF_SHA256:-}
    while [[ $# -gt 0 ]]; do
        case $1 in
            --sha256) [[ $# -ge 2 ]] || die "--sha256 needs the pack's sha256 (pack prints it)"; want=$2; shift 2 ;;
            --sha256=*) want=${1#--sha256=}; shift ;;
            -*) die "unknown option $1" ;;
            *) OUTDIR=$1; shift ;;
        esac
    done
    [[ $want =~ ^[0-9a-f]{64}$ ]] || die "run needs the sha256 pack printed (--sha256 HEX, or IMAGEBUILD_GPU_PROOF_SHA256): nothing in the pack vouches for the pack"
    [[ -f $PACK/pack.tar.xz && ! -L $PACK/pack.tar.xz ]] || die "$PACK/pack.tar.xz: missing (run 'pack' where the engine is, and carry .gpu-proof)"
    local got
    got=$(sha256sum "$PACK/pack.tar.xz" | cut -d' ' -f1)
    [[ $got == "$want" ]] || die "$PACK/pack.tar.xz: sha256 $got, not the $want given: refused"
    command -v nvidia-smi >/dev/null || die "nvidia-smi: not found (run runs on the GPU machine)"
    OUTDIR=${OUTDIR:-${OUT:-$PWD/gpu-proof-out}}
    mkdir -p "$OUTDIR" || die "cannot make $OUTDIR"
    LOG=$OUTDIR/log.txt
    : > "$LOG"; : > "$OUTDIR/results.tsv"
    WORK=$(mktemp -d /tmp/gpu-proof.XXXXXX) || die "mktemp failed"
    trap 'rm -rf "$WORK"' EXIT
    tar -C "$WORK" --no-same-owner --no-same-permissions -xJf "$PACK/pack.tar.xz" MANIFEST bin/imagebuild-nccl-bw syslibs \
        || die "unpacking pack.tar.xz failed"
    chmod 0755 "$WORK/bin/imagebuild-nccl-bw"
    note "# gpu_proof run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    sed 's/^/# pack: /' "$WORK/MANIFEST" | tee -a "$LOG"
    local listed
    listed=$(awk '$1 == "bench_sha256" {print $2}' "$WORK/MANIFEST")
    [[ $(sha256sum "$WORK/bin/imagebuild-nccl-bw" | cut -d' ' -f1) == "$listed" ]] || die "the benchmark in the pack is not the one its manifest names"
    local gpu driver count
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
    count=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
    note "# host: $count x $gpu, driver $driver, kernel $(uname -r), $(. /etc/os-release; echo "$PRETTY_NAME"), $(nproc) cores"

    local cuda nccl
    cuda=$(find_cuda_home) || true
    [[ -n $cuda && -e $cuda/include/cuda_runtime_api.h ]] || die "no CUDA toolkit with include/cuda_runtime_api.h here (nvcc: ${cuda:-none})"
    local cudart
    cudart=$(ls "$cuda"/lib64/libcudart.so.[0-9]* 2>/dev/null | sort -V | tail -n 1)
    [[ -n $cudart ]] || die "no libcudart.so.N in $cuda/lib64"
    nccl=$(find_nccl_home) || true
    [[ -n $nccl ]] || die "no NCCL here (neither PyTorch's nvidia-nccl wheel nor /usr/include/nccl.h)"
    note "# host CUDA: $cuda ($(basename "$cudart")); host NCCL used by both builds: $nccl"

    # --- the same benchmark built here, from this checkout's source ----------------------------
    local host_bin=$WORK/host/imagebuild-nccl-bw cc=gcc mpi_def=
    mkdir -p "$WORK/host"
    if command -v mpicc >/dev/null; then cc=mpicc; mpi_def=-DIMAGEBUILD_WITH_MPI; fi
    if step 120 bench_host_build "$cc" -std=c11 -O2 -Wall -Wextra $mpi_def -I"$cuda/include" -I"$nccl/include" "$SOURCE" \
            -o "$host_bin" -L"$cuda/lib64" -L"$nccl/lib" -l:"$(basename "$cudart")" -l:libnccl.so.2 \
            -Wl,--enable-new-dtags,-rpath,"$cuda/lib64:$nccl/lib"; then
        result bench.host_build pass "$cc ${mpi_def:+(MPI) }against $cuda and $nccl"
    else
        result bench.host_build fail "$cc failed (see bench_host_build.txt)"
    fi

    # the image's binary: the host's CUDA run time and NCCL first, the host's own library path
    # (its driver's libraries), then the image's system libraries for a soname the host lacks
    local fallback=$WORK/fallback lib
    mkdir -p "$fallback"
    for lib in "$WORK"/syslibs/*; do
        [[ -e $lib ]] || continue
        ldconfig -p | grep -q "^[[:space:]]*$(basename "$lib") " || cp "$lib" "$fallback/"
    done
    note "# the image's system libraries used for want of the host's: $(ls "$fallback" | tr '\n' ' ')"
    local image_ld="$nccl/lib:$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$fallback"
    local image_bin=$WORK/bin/imagebuild-nccl-bw
    local in_image=(env LD_LIBRARY_PATH="$image_ld")
    local missing
    missing=$("${in_image[@]}" ldd "$image_bin" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')
    if [[ -z $missing ]]; then result bench.libraries pass "every library of the image's benchmark resolves on this host"
    else result bench.libraries fail "not found: $missing"; fi
    step 30 bench_image_version "${in_image[@]}" "$image_bin" --version \
        && result bench.image_version pass "$(cat "$OUTDIR/bench_image_version.txt")" \
        || result bench.image_version fail "$(tail -n 1 "$OUTDIR/bench_image_version.txt")"
    if [[ -x $host_bin ]]; then
        step 30 bench_host_version "$host_bin" --version \
            && result bench.host_version pass "$(cat "$OUTDIR/bench_host_version.txt")" \
            || result bench.host_version fail "$(tail -n 1 "$OUTDIR/bench_host_version.txt")"
    fi

    # one rank per GPU: under the host's mpirun when both builds link MPI, else one process, -g N
    local launch=() gflag=(-g "$count") how="one process, -g $count"
    if [[ -n $mpi_def ]] && command -v mpirun >/dev/null && "${in_image[@]}" ldd "$image_bin" | grep -q libmpi.so; then
        launch=(mpirun --allow-run-as-root -np "$count" -x LD_LIBRARY_PATH) gflag=(-g 1) how="mpirun -np $count"
    fi
    note "# ranks: $how"

    # --- every collective of the image's binary, every element checked --------------------------
    local coll
    for coll in all_reduce all_gather reduce_scatter broadcast; do
        if step 180 "coll_$coll" "${in_image[@]}" "${launch[@]}" "$image_bin" -C "$coll" -b 8 -e 256M -f 4 -n 20 -w 5 -c 1 "${gflag[@]}"; then
            result "bench.$coll" pass "$(grep -E '^# (Out of bounds|Avg bus)' "$OUTDIR/coll_$coll.txt" | tr '\n' ';')"
        else
            result "bench.$coll" fail "$(tail -n 2 "$OUTDIR/coll_$coll.txt" | tr '\n' ';')"
        fi
    done

    # --- the image's all_reduce against the host build's, alternately, same NCCL -----------------
    local args=(-b 8 -e 1G -f 2 -n 50 -w 10 -c 1 "${gflag[@]}") round
    for round in 1 2 3; do
        step 180 "nccl_image_$round" "${in_image[@]}" "${launch[@]}" "$image_bin" "${args[@]}"
        if [[ -x $host_bin ]]; then
            step 180 "nccl_host_$round" "${launch[@]}" "$host_bin" "${args[@]}"
        fi
    done
    python3 "$HERE/gpu_proof/compare_nccl.py" "$OUTDIR" > "$OUTDIR/nccl_compare.txt" 2>&1
    local crc=$?
    cat "$OUTDIR/nccl_compare.txt" >> "$LOG"
    if (( crc == 0 )); then result bench.compare pass "$(tail -n 1 "$OUTDIR/nccl_compare.txt")"
    else result bench.compare fail "$(tail -n 1 "$OUTDIR/nccl_compare.txt")"; fi

    # --- the smoke suite's GPU tier with each binary (informational: its libraries check fails on
    # any host holding two copies of a library) ---------------------------------------------------
    if [[ -x $host_bin ]]; then
        step 300 smoke_host env PYTHONPATH="$ROOT" IMAGEBUILD_NCCL_BENCH="$host_bin" \
            python3 -m imagebuild.smoke --tier gpu --timeout 150 --report "$OUTDIR/smoke_host.json"
        result smoke.gpu.host info "$(tail -n 1 "$OUTDIR/smoke_host.txt")"
    fi
    step 300 smoke_image "${in_image[@]}" env PYTHONPATH="$ROOT" IMAGEBUILD_NCCL_BENCH="$image_bin" \
        python3 -m imagebuild.smoke --tier gpu --only nccl.bench nccl.bandwidth --timeout 150 --report "$OUTDIR/smoke_image.json"
    if grep -q '"passed": true' "$OUTDIR/smoke_image.json" 2>/dev/null; then
        result smoke.gpu.image pass "$(tail -n 1 "$OUTDIR/smoke_image.txt")"
    else
        result smoke.gpu.image fail "$(tail -n 1 "$OUTDIR/smoke_image.txt")"
    fi

    {
        echo "gpu_proof $(date -u +%Y-%m-%d), $count x $gpu, driver $driver"
        echo
        echo "| check | result | detail |"
        echo "|---|---|---|"
        awk -F'\t' '{gsub(/\|/, "/", $3); printf "| %s | %s | %s |\n", $1, $2, $3}' "$OUTDIR/results.tsv"
    } > "$OUTDIR/summary.md"
    cat "$OUTDIR/summary.md"
    note "# $FAILS check(s) failed"
    (( FAILS == 0 ))
}

case ${1:-} in
    pack) shift; pack "$@" ;;
    run) shift; run "$@" ;;
    *) echo "usage: $0 pack [IMAGE] | run --sha256 HEX [OUTDIR]" >&2; exit 2 ;;
esac
