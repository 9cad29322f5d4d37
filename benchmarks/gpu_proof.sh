#!/usr/bin/env bash
# The communication image's own compiled binaries on a real GPU (issue 28).
#
#   benchmarks/gpu_proof.sh pack [IMAGE]   on the machine with the engine
#   benchmarks/gpu_proof.sh run [OUTDIR]   on the GPU machine, from the repository root
#
# pack: copies the compiled trees of IMAGE (default: the newest local image labelled as the
#   Debian communication runtime image) out of the engine, /opt/{gdrcopy,ucx,openmpi,nccl-tests}
#   without build leftovers (*.o), with the image's copies of the system libraries they link
#   (used on the GPU machine only for a soname it lacks), into .gpu-proof/trees.tar.xz, beside the
#   nccl-tests source tarball (from ../shared/sources, checked against SOURCES.md) and a manifest.
#   It prints the packed size and refuses more than 60 MiB (a device call carries 64 MiB).
# run: checks the archive's hash, unpacks the trees at the paths they were built for (it refuses
#   if those paths exist), and runs the image's binaries against the host's driver, CUDA run time
#   and NCCL (the trees hold no NCCL: the image takes it from NVIDIA's wheel):
#   ucx_info -d (CUDA transports), ucx_perftest on CUDA memory, a CUDA-aware MPI_Allreduce on
#   device buffers under the image's mpirun (benchmarks/gpu_proof/allreduce_cuda.c, built with the
#   image's mpicc), the image's all_reduce_perf against the same nccl-tests built here from source,
#   and the smoke suite's GPU tier twice (host's Open MPI and host-built nccl-tests; the image's
#   trees). Everything goes to OUTDIR (default $OUT, else ./gpu-proof-out): log.txt, summary.md,
#   results.tsv. Exit 0 when every check passed.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
PACK=${IMAGEBUILD_GPU_PROOF_DIR:-$ROOT/.gpu-proof}
TREES=(gdrcopy ucx openmpi nccl-tests)
MAX_PACK_BYTES=$((60 * 1024 * 1024))
NCCL_TESTS_TARBALL=nccl-tests-2.17.6.tar.gz

die() { echo "gpu_proof: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
pack() {
    command -v docker >/dev/null || die "docker: not found (pack runs where the engine is)"
    local image=${1:-}
    stage= cid=
    if [[ -z $image ]]; then
        image=$(docker images --format '{{.Repository}}:{{.Tag}}' --filter label=io.imagebuild.flavor=runtime \
                    --filter label=io.imagebuild.stack.os=debian12 \
                    --filter label=io.imagebuild.stack.pytorch=none | grep -v '<none>' | head -n 1)
        [[ -n $image ]] || die "no local communication runtime image (label io.imagebuild.stack.os=debian12, pytorch none): build it, or name one"
    fi
    local id label version
    id=$(docker image inspect -f '{{.Id}}' "$image") || die "$image: no such image"
    label=$(docker image inspect -f '{{index .Config.Labels "io.imagebuild.image-id"}}' "$image")
    version=$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$image")
    [[ -n $label ]] || die "$image: not an imagebuild image (no io.imagebuild.image-id label)"

    local sources=${IMAGEBUILD_SOURCES:-$ROOT/../shared/sources}
    local want
    want=$(awk -F'|' -v f="$NCCL_TESTS_TARBALL" '$2 ~ f {gsub(/ /, "", $6); print $6}' "$sources/SOURCES.md" 2>/dev/null)
    [[ -n $want ]] || die "$sources/SOURCES.md: no sha256 for $NCCL_TESTS_TARBALL"
    echo "$want  $sources/$NCCL_TESTS_TARBALL" | sha256sum -c --quiet - \
        || die "$sources/$NCCL_TESTS_TARBALL: sha256 differs from SOURCES.md"

    stage=$(mktemp -d) || die "mktemp failed"  # global: the EXIT trap reads it
    trap 'rm -rf "$stage"; [[ -n ${cid:-} ]] && docker rm -f "$cid" >/dev/null 2>&1' EXIT
    cid=$(docker create --entrypoint /bin/true "$image") || die "docker create $image failed"
    mkdir -p "$stage/root/opt" "$stage/root/syslibs"
    local t
    for t in "${TREES[@]}"; do
        docker cp "$cid:/opt/$t" "$stage/root/opt/" || die "$image has no /opt/$t"
    done
    find "$stage/root/opt" -name '*.o' -delete
    # the system libraries the trees link, from the image (a fallback on the GPU machine)
    local libs
    libs=$(docker run --rm --entrypoint /bin/bash -e IMAGEBUILD_CHECK=0 "$image" -c '
        find /opt/gdrcopy /opt/ucx /opt/openmpi /opt/nccl-tests -type f \( -perm -u+x -o -name "*.so*" \) \
             ! -name "*.o" ! -name "*.la" ! -name "*.a" -exec ldd {} \; 2>/dev/null |
        awk "\$2 == \"=>\" && \$3 ~ /^\\/(usr\\/)?lib/ {print \$3}" | sort -u' ) \
        || die "ldd in $image failed"
    local lib base
    for lib in $libs; do
        base=$(basename "$lib")
        case $base in libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) continue ;; esac
        docker cp -L "$cid:$lib" "$stage/root/syslibs/$base" || die "docker cp $lib failed"
    done
    docker rm -f "$cid" >/dev/null; cid=

    mkdir -p "$PACK"
    rm -f "$PACK/trees.tar.xz" "$PACK/trees.tar.xz.part"
    tar -C "$stage/root" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - opt syslibs \
        | xz -T0 -1 > "$PACK/trees.tar.xz.part" || die "tar | xz failed"
    mv "$PACK/trees.tar.xz.part" "$PACK/trees.tar.xz"
    cp "$sources/$NCCL_TESTS_TARBALL" "$PACK/"
    local unpacked packed
    unpacked=$(du -sb "$stage/root" | cut -f1)
    packed=$(stat -c %s "$PACK/trees.tar.xz")
    {
        echo "image $image"
        echo "image_id $id"
        echo "image_label $label"
        echo "image_version $version"
        for t in "${TREES[@]}"; do echo "tree /opt/$t $(du -sb "$stage/root/opt/$t" | cut -f1)"; done
        echo "syslibs $(ls "$stage/root/syslibs" | tr '\n' ' ')"
        echo "unpacked_bytes $unpacked"
        echo "packed_bytes $packed"
    } > "$PACK/MANIFEST"
    (cd "$PACK" && sha256sum trees.tar.xz "$NCCL_TESTS_TARBALL" > SHA256SUMS)
    cat "$PACK/MANIFEST"
    if (( packed > MAX_PACK_BYTES )); then
        die "trees.tar.xz is $packed bytes, over the $MAX_PACK_BYTES a device call can carry with the checkout"
    fi
    echo "packed $((packed / 1024 / 1024)) MiB from $((unpacked / 1024 / 1024)) MiB: carry .gpu-proof and run 'bash benchmarks/gpu_proof.sh run'"
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
        [[ -n $so ]] && { mkdir -p /tmp/gpu-proof/system-nccl/lib
                          ln -sf /usr/include /tmp/gpu-proof/system-nccl/include
                          ln -sf "$so" /tmp/gpu-proof/system-nccl/lib/libnccl.so.2
                          echo /tmp/gpu-proof/system-nccl; }
    fi
}

run() {
    OUTDIR=${1:-${OUT:-$PWD/gpu-proof-out}}
    mkdir -p "$OUTDIR" || die "cannot make $OUTDIR"
    LOG=$OUTDIR/log.txt
    : > "$LOG"; : > "$OUTDIR/results.tsv"
    [[ -f $PACK/trees.tar.xz ]] || die "$PACK/trees.tar.xz: missing (run 'pack' where the engine is, and carry .gpu-proof)"
    (cd "$PACK" && sha256sum -c --quiet SHA256SUMS) || die "$PACK: sha256 of what was carried differs from SHA256SUMS"
    command -v nvidia-smi >/dev/null || die "nvidia-smi: not found (run runs on the GPU machine)"
    local t
    for t in "${TREES[@]}"; do [[ -e /opt/$t ]] && die "/opt/$t exists here: the trees unpack at the paths they were built for"; done
    local work=/tmp/gpu-proof
    rm -rf "$work"; mkdir -p "$work"
    tar -C "$work" -xJf "$PACK/trees.tar.xz" || die "unpacking trees.tar.xz failed"
    note "# gpu_proof run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    sed 's/^/# pack: /' "$PACK/MANIFEST" | tee -a "$LOG"
    local gpu driver count
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
    count=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
    note "# host: $count x $gpu, driver $driver, kernel $(uname -r), $(. /etc/os-release; echo "$PRETTY_NAME"), $(nproc) cores"

    local cuda nccl
    cuda=$(find_cuda_home) || true
    [[ -n $cuda && -e $cuda/lib64/libcudart.so.13 ]] || die "no CUDA 13 toolkit with lib64/libcudart.so.13 here (nvcc: ${cuda:-none})"
    nccl=$(find_nccl_home) || true
    [[ -n $nccl ]] || die "no NCCL here (neither PyTorch's nvidia-nccl wheel nor /usr/include/nccl.h)"
    note "# host CUDA: $cuda ($("$cuda/bin/nvcc" --version | tail -n 1)); host NCCL used by both nccl-tests builds: $nccl"

    # --- nccl-tests built here from the same sources, against the host's NCCL and Open MPI ------
    local host_mpi_home= mpi_flag=0
    if command -v mpicc >/dev/null; then
        host_mpi_home=$(dirname "$(mpicc --showme:incdirs | awk '{print $1}')")
        [[ -e $host_mpi_home/include/mpi.h ]] && mpi_flag=1
    fi
    mkdir -p "$work/nccl-tests" "$work/nccl-home/lib"
    ln -sf "$nccl/include" "$work/nccl-home/include"
    ln -sf "$nccl/lib/libnccl.so.2" "$work/nccl-home/lib/libnccl.so"
    ln -sf "$nccl/lib/libnccl.so.2" "$work/nccl-home/lib/libnccl.so.2"
    tar -C "$work/nccl-tests" --strip-components=1 -xzf "$PACK/$NCCL_TESTS_TARBALL"
    local host_bin=$work/nccl-tests/build/all_reduce_perf
    # all_reduce_perf alone: the other binaries are not compared
    if step 300 nccl_tests_build make -C "$work/nccl-tests/src" -j"$(nproc)" "$host_bin" BUILDDIR="$work/nccl-tests/build" MPI=$mpi_flag \
            ${host_mpi_home:+MPI_HOME=$host_mpi_home} CUDA_HOME="$cuda" NCCL_HOME="$work/nccl-home" \
            NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90"; then
        result nccl_tests.host_build pass "nccl-tests from $NCCL_TESTS_TARBALL, MPI=$mpi_flag${host_mpi_home:+ ($host_mpi_home)}, sm_90, host nvcc"
    else
        result nccl_tests.host_build fail "make failed (see nccl_tests_build.txt)"
    fi
    # --- the smoke suite's GPU tier as on the earlier host runs, before the trees are unpacked:
    # informational (its libraries check fails on any host holding two copies of a library) ---
    step 300 smoke_host env PYTHONPATH="$ROOT" IMAGEBUILD_NCCL_TESTS="$host_bin" \
        python3 -m imagebuild.smoke --tier gpu --timeout 150 --report "$OUTDIR/smoke_host.json"
    result smoke.gpu.host info "$(tail -n 1 "$OUTDIR/smoke_host.txt")"
    # --- the image's trees, at the paths they were built for -----------------------------------
    for t in "${TREES[@]}"; do mv "$work/opt/$t" "/opt/$t"; done
    trap 'for t in "${TREES[@]}"; do rm -rf "/opt/$t"; done' EXIT

    # what the image's ENV sets, with the host's CUDA run time and NCCL in place of the image's wheels
    local image_ld="/opt/openmpi/lib:/opt/ucx/lib:/opt/gdrcopy/lib:$nccl/lib:$cuda/lib64"
    # the image's system libraries for a soname the host lacks, last in the path
    local fallback=$work/fallback lib
    mkdir -p "$fallback"
    for lib in "$work"/syslibs/*; do
        ldconfig -p | grep -q "^[[:space:]]*$(basename "$lib") " || cp "$lib" "$fallback/"
    done
    note "# the image's system libraries used for want of the host's: $(ls "$fallback" | tr '\n' ' ')"
    # the host's own library path (where its driver's libraries may be) stays, before the fallback
    image_ld="$image_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$fallback"
    local missing
    missing=$(find /opt/gdrcopy /opt/ucx /opt/openmpi /opt/nccl-tests -type f \( -perm -u+x -o -name '*.so*' \) \
                   ! -name '*.la' ! -name '*.a' -exec env LD_LIBRARY_PATH="$image_ld" ldd {} \; 2>/dev/null \
              | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
    if [[ -z $missing ]]; then result libraries pass "every library of the trees resolves on this host"
    else result libraries fail "not found: $missing"; fi

    # a command under the image's library path and PATH (an argv prefix: timeout cannot run a function)
    local in_image=(env LD_LIBRARY_PATH="$image_ld" PATH="/opt/openmpi/bin:/opt/ucx/bin:/opt/nccl-tests/bin:$PATH")

    # --- UCX: transports ------------------------------------------------------------------
    step 60 ucx_info "${in_image[@]}" /opt/ucx/bin/ucx_info -v
    step 60 ucx_info_d "${in_image[@]}" /opt/ucx/bin/ucx_info -d
    local tls want_gdr=no
    tls=$(awk '/Transport:/ {print $3}' "$OUTDIR/ucx_info_d.txt" | sort -u | tr '\n' ' ')
    [[ -e /dev/gdrdrv ]] && want_gdr=yes
    local need="cuda_copy cuda_ipc" t2 lacking=
    [[ $want_gdr == yes ]] && need="$need gdr_copy"
    for t2 in $need; do [[ " $tls " == *" $t2 "* ]] || lacking="$lacking $t2"; done
    if [[ -z $lacking ]]; then result ucx.transports pass "$tls(/dev/gdrdrv: $want_gdr)"
    else result ucx.transports fail "missing:$lacking; found: $tls(/dev/gdrdrv: $want_gdr)"; fi

    # --- UCX: perftest on CUDA memory, two processes on this host ---------------------------
    local port=13337 size
    for size in 1048576 67108864; do
        timeout 120 "${in_image[@]}" /opt/ucx/bin/ucx_perftest -p $port > "$OUTDIR/ucx_perftest_server_$size.txt" 2>&1 &
        local srv=$!
        sleep 2
        if step 90 "ucx_perftest_$size" "${in_image[@]}" /opt/ucx/bin/ucx_perftest -p $port -t tag_bw -m cuda,cuda -s $size -n 1000 -w 100 127.0.0.1; then
            local final
            final=$(grep -E '^ *Final:' "$OUTDIR/ucx_perftest_$size.txt" | tail -n 1 | tr -s ' ')
            result "ucx.perftest.$size" pass "tag_bw cuda->cuda $size B: ${final:-no Final line}"
        else
            result "ucx.perftest.$size" fail "ucx_perftest tag_bw on CUDA memory failed (see ucx_perftest_$size.txt)"
        fi
        local w
        for w in 1 2 3 4 5 6 7 8 9 10; do kill -0 $srv 2>/dev/null || break; sleep 1; done
        kill $srv 2>/dev/null; wait $srv 2>/dev/null
        port=$((port + 1))
    done

    # --- Open MPI: CUDA-aware MPI_Allreduce on device buffers, two ranks ---------------------
    if step 120 mpicc "${in_image[@]}" /opt/openmpi/bin/mpicc -O2 -Wall -I"$cuda/include" "$HERE/gpu_proof/allreduce_cuda.c" \
            -o "$work/allreduce_cuda" -L"$cuda/lib64" -l:libcudart.so.13 \
       && step 180 mpi_allreduce "${in_image[@]}" /opt/openmpi/bin/mpirun --allow-run-as-root -np 2 --mca pml ucx \
            --mca pml_ucx_tls any --mca pml_ucx_devices any -x LD_LIBRARY_PATH -x PATH -x UCX_PROTO_INFO=y \
            "$work/allreduce_cuda"; then
        result mpi.cuda_allreduce pass "$(grep -E '^ranks=|^time|^ALL OK' "$OUTDIR/mpi_allreduce.txt" | tr '\n' ';')"
    else
        local why
        why=$(cat "$OUTDIR/mpicc.txt" "$OUTDIR/mpi_allreduce.txt" 2>/dev/null | grep -aE '^rank [0-9]+:|FAIL|rror' | head -n 3)
        [[ -n $why ]] || why=$(cat "$OUTDIR/mpicc.txt" "$OUTDIR/mpi_allreduce.txt" 2>/dev/null | grep -av 'unable to open mca_' | grep -a . | tail -n 3)
        result mpi.cuda_allreduce fail "$(echo "$why" | tr '\n' ';')"
    fi

    # --- nccl-tests: the image's binary against the host-built one, alternately, same NCCL ---
    local args=(-b 8 -e 1G -f 2 -g 1 -n 50 -w 10 -c 1) round
    for round in 1 2 3; do
        step 120 "nccl_image_$round" "${in_image[@]}" /opt/openmpi/bin/mpirun --allow-run-as-root -np 1 -x LD_LIBRARY_PATH \
            /opt/nccl-tests/bin/all_reduce_perf "${args[@]}"
        if [[ -x $host_bin ]]; then
            if (( mpi_flag )); then
                step 120 "nccl_host_$round" env LD_LIBRARY_PATH="$work/nccl-home/lib:$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
                    mpirun --allow-run-as-root -np 1 -x LD_LIBRARY_PATH "$host_bin" "${args[@]}"
            else
                step 120 "nccl_host_$round" env LD_LIBRARY_PATH="$work/nccl-home/lib:$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$host_bin" "${args[@]}"
            fi
        fi
    done
    python3 "$HERE/gpu_proof/compare_nccl.py" "$OUTDIR" > "$OUTDIR/nccl_compare.txt" 2>&1
    local crc=$?
    cat "$OUTDIR/nccl_compare.txt" >> "$LOG"
    if (( crc == 0 )); then result nccl_tests.compare pass "$(tail -n 1 "$OUTDIR/nccl_compare.txt")"
    else result nccl_tests.compare fail "$(tail -n 1 "$OUTDIR/nccl_compare.txt")"; fi

    # --- the smoke suite's GPU tier with the image's trees (informational, as above) ----------
    step 300 smoke_trees "${in_image[@]}" env PYTHONPATH="$ROOT" IMAGEBUILD_NCCL_TESTS=/opt/nccl-tests/bin \
        python3 -m imagebuild.smoke --tier gpu --timeout 150 --report "$OUTDIR/smoke_trees.json"
    result smoke.gpu.trees info "$(tail -n 1 "$OUTDIR/smoke_trees.txt")"

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
    *) echo "usage: $0 pack [IMAGE] | run [OUTDIR]" >&2; exit 2 ;;
esac
