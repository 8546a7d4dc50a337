//! The long texts after `--help` of the serving commands and `rlun stats`
//! (they end up in their man pages too), apart from the clap definitions
//! that use them.

pub const MOUNT_AFTER_HELP: &str = "\
Caching: by default the kernel page cache holds file data (repeated reads
are served without asking rlun, mmap works); it stays coherent because every
write goes through this mount, which assumes it is the LUN's only writer.
--direct-io sends every read and write to rlun at the caller's size instead:
use it, with --cache none, when other initiators write to the LUN too.
--cache picks rlun's own cache: none by default with the kernel page cache
(a second copy would only cost memory and CPU), write-through by default
with --direct-io (reads cached, writes complete when the target has them);
write-back makes writes complete in memory: they reach the target within
--writeback-delay, on fsync, or when the mount ends, and are lost if rlun is
killed before.

--writeback-cache on lets the kernel cache buffered writes too: write(2)
completes in the page cache and the kernel writes back 1 MiB requests, many
at once (much faster sequential writes). fsync still reaches the target
(SYNCHRONIZE CACHE), and close and unmount write the data back before they
return; but data not yet written back is lost if rlun is killed, a write
past the end of the LUN fails at fsync/close rather than at write(2), and a
capacity change shows only after a remount. Off by default.

Examples:
  rlun mount iscsi://10.0.0.5/iqn.2026-11.org.example:store /mnt/store
  rlun mount --daemon --uid 1000 --mode 0640 store /mnt/store    # config name
  losetup -f --show /mnt/store/lun1 && mount /dev/loop0 /data
  rlun umount /mnt/store";

pub const SERVE_AFTER_HELP: &str = "\
Exports: lun<N> for LUN N (the default export is the first). Transmission
flags: flush, FUA, write-zeroes, cache, multi-conn, and trim and fast-zero
when the LUN can unmap (LBPU and LBPRZ); read-only for write-protected LUNs
or --read-only. Block sizes: minimum = the LUN's block size (clients that
ask for it must align; others may send any offset and length, served by
read-modify-write), preferred = the cache page (4 KiB or more), maximum
payload 0xffffffff (no fixed limit: READs and WRITEs over 32 MiB are
streamed in 4 MiB pieces; a READ with DF over 32 MiB gets EOVERFLOW).
base:allocation: GET LBA STATUS on thin LUNs (holes, and
zeros with LBPRZ); everything else is reported as allocated data.

Security: NBD has no authentication of its own. --socket is protected by
the file's permissions (created 0600). --listen on anything but a loopback
address needs TLS (--tls-cert/--tls-key, and --tls-ca to require client
certificates) or an explicit --allow-insecure: otherwise anyone who can
reach the port reads and writes the LUN.

Examples:
  rlun serve iscsi://10.0.0.5/iqn.2026-11.org.example:store --socket /run/rlun/store.sock
  qemu-img info 'nbd+unix:///lun1?socket=/run/rlun/store.sock'
  rlun serve store --listen 0.0.0.0:10809 --tls-cert srv.pem --tls-key srv.key
  nbdinfo --list nbds://server.example/";

pub const STATS_AFTER_HELP: &str = "\
Latency is measured where every front end meets the exports: from the
request reaching rlun's export layer to its answer, cache hits included
(not the kernel's or the network's share of the time an application sees).
Percentiles come from log-linear buckets at most 6.25% wide.

The control socket is <state dir>/<escaped WHAT>.sock, mode 0600, next to
the pid file `rlun list` reads (/run/rlun/ for root, else
$XDG_RUNTIME_DIR/rlun/ or /tmp/rlun-UID/). Its protocol: one JSON line
{\"version\":1,\"request\":\"stats\"} in, one JSON line out.

JSON output (--json), version 1, one object per sample:
  version            1
  interval           seconds since the previous sample (--watch), or null
  errors             messages for processes that could not be asked
  processes[]        pid, kind (mounted, served, attached), what, target,
                     portal, uptime (s), reconnects, session_up,
                     down_seconds (time without a connection, the current
                     outage included), last_outage_seconds (the last one
                     that ended, or null), copied_bytes,
                     cache_copied_bytes, data_path_registrations, luns[]
  luns[]             lun, size, in_flight, total, interval, errors, cache
  errors             failed requests since start by kind, the kinds seen
                     only: unreachable (target out of reach past the
                     replacement timeout), target (a SCSI error: medium,
                     hardware…), read_only, no_space, out_of_range,
                     removed (the LUN left the target), other
  total, interval    since start / over the interval (interval: null on
                     the first sample): reads, read_bytes, read_errors,
                     writes, write_bytes, write_errors, other (flushes,
                     zeroing, trims), other_errors, read_latency_us and
                     write_latency_us ({p50, p99, p99_9} in microseconds,
                     null when there was no such request)
  cache              hits, misses (page lookups), hit_ratio (null before
                     any), readahead_pages, readahead_hits (read ahead,
                     then read), readahead_wasted (read ahead, evicted
                     unread), bypassed_reads, evictions, cached_bytes,
                     cache_size, dirty_bytes, dirty_age (seconds the
                     oldest dirty data has waited for write-back; 0 when
                     none), writebacks, flushes
Counters only grow while a process runs; compare two samples for rates.
Fields may be added; none is removed or changes meaning within a version.

Exit codes: 0 printed; 5 nothing serves WHAT, or its socket is stale (the
rlun that made it is gone); 4 the socket belongs to another user; 7 the
process answered something that is not this protocol.

Examples:
  rlun stats
  rlun stats /mnt/store --watch
  rlun stats /dev/nbd0 --watch 5s --json";

pub const ATTACH_AFTER_HELP: &str = "\
Before it disconnects the device, rlun fsyncs /dev/nbdN, so data a program
that holds the device open has written but the kernel still buffers reaches
the target (the kernel would drop it at the disconnect). A mounted or
held-open device is still detached. Unmount file systems on the device
before detaching: a file system's own dirty data is written back by
umount/sync, not by the device's fsync.
The kernel is driven over the nbd netlink interface, or over the ioctls on
kernels without it; RLUN_NBD_INTERFACE=ioctl (or netlink) forces one.

ublk (--ublk, Linux 6.0+ with ublk_drv, e.g. Debian's 6.12 kernel): devices
are created with user recovery. When rlun dies (kill -9, a crash, an upgrade)
the kernel keeps /dev/ublkbN and holds its I/O; `rlun attach --recover URL
/dev/ublkbN` takes it over and the held I/O completes. Data a write-back cache
held unwritten dies with the process: recover only write-through or none
devices without loss. `rlun detach /dev/ublkbN` of a device whose rlun died
deletes it, and the I/O held on it fails.

Examples:
  modprobe nbd
  rlun attach iscsi://10.0.0.5/iqn.2026-11.org.example:store/1 --daemon
  rlun attach store /dev/nbd2 --connections 4
  rlun detach /dev/nbd0
  modprobe ublk_drv
  rlun attach --ublk store --daemon
  rlun attach --recover store /dev/ublkb0 --daemon";
