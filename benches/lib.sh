# Shared by the side-by-side benchmarks (compare.sh, cache.sh, fuse.sh):
# a tmpfs-backed file LUN and a private tgtd. Source it after defining
# die(); it sets $lun_file, $port, $tgtd_pid and defines tgtadm_.

# bench_file_lun PREFIX MIB: a file of MIB MiB of random bytes, on tmpfs when
# it has room (every run then reads RAM, so the figures compare initiator +
# target overhead rather than the disk), else /var/tmp.
bench_file_lun() {
    local prefix=$1 mib=$2 shm_free_mib
    shm_free_mib=$(df -Pm /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')
    if [ -n "$shm_free_mib" ] && [ "$shm_free_mib" -gt $((mib + 512)) ]; then
        lun_file=$(mktemp "/dev/shm/$prefix-lun.XXXXXX")
    else
        lun_file=$(mktemp "/var/tmp/$prefix-lun.XXXXXX")
    fi
    echo "filling ${mib} MiB file LUN $lun_file ..." >&2
    dd if=/dev/urandom of="$lun_file" bs=1M count="$mib" status=none
}

# bench_start_tgtd LOGDIR: a private tgtd whose control port and portal port
# are one free number, killed with this script (setpriv --pdeathsig).
bench_start_tgtd() {
    local logdir=$1
    port=$(python3 -c '
import random, socket
for _ in range(1000):
    p = random.randint(10000, 32767)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
')
    [ -n "$port" ] || die "no free port for tgtd"
    setpriv --pdeathsig KILL tgtd -f -C "$port" --iscsi "portal=127.0.0.1:$port" \
        >"$logdir/tgtd.log" 2>&1 </dev/null &
    tgtd_pid=$!
    for _ in $(seq 100); do
        kill -0 "$tgtd_pid" 2>/dev/null || die "tgtd exited: $(cat "$logdir/tgtd.log")"
        if tgtadm_ --op show --mode sys >/dev/null 2>&1 &&
            ss -Hltnp "sport = :$port" | grep -q "pid=$tgtd_pid,"; then
            return 0
        fi
        sleep 0.1
    done
    die "tgtd did not start: $(cat "$logdir/tgtd.log")"
}

tgtadm_() { tgtadm -C "$port" --lld iscsi "$@"; }

# bench_build_rlun: build the default release binary when it is missing.
bench_build_rlun() {
    if [ ! -x "$RLUN" ]; then
        [ "$RLUN" = "$RLUN_DEFAULT" ] || die "RLUN=$RLUN is not an executable"
        echo "building $RLUN_DEFAULT ..." >&2
        cargo build --release
    fi
}
