# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_rlun_global_optspecs
    string join \n v/verbose q/quiet threads= config= h/help V/version
end

function __fish_rlun_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_rlun_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_rlun_using_subcommand
    set -l cmd (__fish_rlun_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c rlun -n "__fish_rlun_needs_command" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_needs_command" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_needs_command" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_needs_command" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_needs_command" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "discover" -d 'List the targets a portal offers (SendTargets discovery)'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "ls" -d 'List LUNs with size, block size, vendor and product'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "info" -d 'Show everything about one LUN: inquiry, capacity, VPD limits and the negotiated session parameters'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "cp" -d 'Copy a whole LUN to a file, a file to a LUN, or a LUN to a LUN'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "bench" -d 'Measure a LUN: IOPS, MB/s, latency percentiles and CPU time'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "mount" -d 'Mount a target\'s LUNs as files (FUSE): `lun<N>` for each disk LUN'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "umount" -d 'Unmount an rlun mount and wait until its rlun process has written back cached data and logged out'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "serve" -d 'Serve a target\'s LUNs to NBD clients: `lun<N>` for each disk LUN'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "attach" -d 'Attach one LUN as a kernel block device /dev/nbdN (needs root and the nbd module)'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "detach" -d 'Detach a device attached by `rlun attach`: fsync the device (what the kernel buffers for it is written to the target), then the owning rlun fsyncs it again, disconnects it, writes back and logs out; fails if written data did not reach the target. A device left connected by an rlun that was killed is disconnected directly'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "list" -d 'List what this user\'s rlun processes have mounted, served and attached: one line each, kind (mounted, served, attached), mount point / socket or address / device, and pid'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "completions" -d 'Print a shell completion script (bash, zsh or fish) to standard output'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "generate-man" -d 'Write the man pages into a directory'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l initiator-name -d 'Our iSCSI name (default: RLUN_INITIATOR_NAME, else the config file\'s initiator_name, else the InitiatorName= of open-iscsi\'s /etc/iscsi/initiatorname.iscsi, else iqn.2026-11.org.rlun:<hostname>)' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l chap-user -d 'CHAP user name (the secret comes from RLUN_CHAP_SECRET, --chap-file or the config)' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l chap-file -d 'File with CHAP credentials (TOML: user, secret, mutual_user, mutual_secret)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l connect-timeout -d 'Give up connecting after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l login-timeout -d 'Give up logging in after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l replacement-timeout -d 'When the connection is lost, keep logging in again until I/O has waited this long without any command completing, then fail pending and new I/O (a login alone does not count; 0 disables reconnecting)' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU (MaxRecvDataSegmentLength we declare, 512 to 16M-1)' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l command-timeout -d 'Abort and retry a SCSI command that has no answer after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand discover" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand discover" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand discover" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand discover" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l initiator-name -d 'Our iSCSI name (default: RLUN_INITIATOR_NAME, else the config file\'s initiator_name, else the InitiatorName= of open-iscsi\'s /etc/iscsi/initiatorname.iscsi, else iqn.2026-11.org.rlun:<hostname>)' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l chap-user -d 'CHAP user name (the secret comes from RLUN_CHAP_SECRET, --chap-file or the config)' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l chap-file -d 'File with CHAP credentials (TOML: user, secret, mutual_user, mutual_secret)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l connect-timeout -d 'Give up connecting after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l login-timeout -d 'Give up logging in after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l replacement-timeout -d 'When the connection is lost, keep logging in again until I/O has waited this long without any command completing, then fail pending and new I/O (a login alone does not count; 0 disables reconnecting)' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU (MaxRecvDataSegmentLength we declare, 512 to 16M-1)' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l command-timeout -d 'Abort and retry a SCSI command that has no answer after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand ls" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand ls" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand ls" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand ls" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand info" -l initiator-name -d 'Our iSCSI name (default: RLUN_INITIATOR_NAME, else the config file\'s initiator_name, else the InitiatorName= of open-iscsi\'s /etc/iscsi/initiatorname.iscsi, else iqn.2026-11.org.rlun:<hostname>)' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l chap-user -d 'CHAP user name (the secret comes from RLUN_CHAP_SECRET, --chap-file or the config)' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l chap-file -d 'File with CHAP credentials (TOML: user, secret, mutual_user, mutual_secret)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand info" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand info" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand info" -l connect-timeout -d 'Give up connecting after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l login-timeout -d 'Give up logging in after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l replacement-timeout -d 'When the connection is lost, keep logging in again until I/O has waited this long without any command completing, then fail pending and new I/O (a login alone does not count; 0 disables reconnecting)' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU (MaxRecvDataSegmentLength we declare, 512 to 16M-1)' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l command-timeout -d 'Abort and retry a SCSI command that has no answer after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand info" -l json -d 'Print JSON instead of text'
complete -c rlun -n "__fish_rlun_using_subcommand info" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand info" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand info" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand info" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l bs -d 'Size of each SCSI transfer' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l qd -d 'Transfers kept in flight' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l offset -d 'Start at this byte of both sides (resume a stopped copy)' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l initiator-name -d 'Our iSCSI name (default: RLUN_INITIATOR_NAME, else the config file\'s initiator_name, else the InitiatorName= of open-iscsi\'s /etc/iscsi/initiatorname.iscsi, else iqn.2026-11.org.rlun:<hostname>)' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l chap-user -d 'CHAP user name (the secret comes from RLUN_CHAP_SECRET, --chap-file or the config)' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l chap-file -d 'File with CHAP credentials (TOML: user, secret, mutual_user, mutual_secret)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l connect-timeout -d 'Give up connecting after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l login-timeout -d 'Give up logging in after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l replacement-timeout -d 'When the connection is lost, keep logging in again until I/O has waited this long without any command completing, then fail pending and new I/O (a login alone does not count; 0 disables reconnecting)' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU (MaxRecvDataSegmentLength we declare, 512 to 16M-1)' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l command-timeout -d 'Abort and retry a SCSI command that has no answer after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l progress -d 'Show progress also when stderr is no terminal (a line a second)'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l no-progress -d 'Never show progress'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l no-sparse -d 'Write the zeros into a file too (default: leave holes)'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l fua -d 'Set the FUA bit on writes (write through the target\'s cache)'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l pattern -d 'Access pattern' -r -f -a "read\t'Sequential reads'
write\t'Sequential writes'
randread\t'Uniformly random reads'
randwrite\t'Uniformly random writes'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l bs -d 'Block size of each I/O (e.g. 4k, 128k, 1M)' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l qd -d 'I/Os kept in flight' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l duration -d 'How long to run (e.g. 10s, 500ms, 1m)' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l size -d 'Limit I/O to the first SIZE bytes of the LUN (default: whole LUN)' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l initiator-name -d 'Our iSCSI name (default: RLUN_INITIATOR_NAME, else the config file\'s initiator_name, else the InitiatorName= of open-iscsi\'s /etc/iscsi/initiatorname.iscsi, else iqn.2026-11.org.rlun:<hostname>)' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l chap-user -d 'CHAP user name (the secret comes from RLUN_CHAP_SECRET, --chap-file or the config)' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l chap-file -d 'File with CHAP credentials (TOML: user, secret, mutual_user, mutual_secret)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l connect-timeout -d 'Give up connecting after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l login-timeout -d 'Give up logging in after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l replacement-timeout -d 'When the connection is lost, keep logging in again until I/O has waited this long without any command completing, then fail pending and new I/O (a login alone does not count; 0 disables reconnecting)' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU (MaxRecvDataSegmentLength we declare, 512 to 16M-1)' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l command-timeout -d 'Abort and retry a SCSI command that has no answer after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l cache -d 'rlun\'s own cache of LUN data. Default: for mount none (the kernel page cache already caches), write-through with --direct-io; for serve and attach write-through (shared by every connection; it wins for 4 KiB random and hot re-reads, and reads of 128 KiB or more streamed with several in flight, as nbdcopy does, bypass it); for bench no cache at all (I/O goes straight to the LUN)' -r -f -a "none\t'Through LunDevice, but every I/O goes to the target'
write-through\t'Reads cached; writes complete when the target has them'
write-back\t'Writes complete in memory and are written back later'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l cache-size -d 'Memory cap of rlun\'s cache for the whole process: every LUN the command opens shares it (a mount of a target with 16 LUNs uses at most this much in all, not 16 times it). 7/8 of it (at least SIZE minus 256M) holds cache pages, reserved once as one region when the command starts and, over iSER, registered with the RDMA device once per connection; the rest bounds the cache\'s reads and write-backs in flight. Unused with --cache none' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l readahead -d 'Read ahead of sequential streams in rlun\'s cache; mount also raises the kernel\'s read-ahead window to 8 MiB (when rlun may write /sys/class/bdi). Off: no read-ahead at all' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l writeback-delay -d 'Longest time written data waits in memory with --cache write-back before it is written back' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l stats-interval -d 'Log each LUN\'s cache counters (hits, misses, read-ahead hits, evictions, dirty bytes, flushes) at this interval, at info level' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l json -d 'Print one JSON object instead of text'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l allow-write -d 'Confirm that a write pattern may overwrite the LUN'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l uid -d 'Owner of the files (default: the user running rlun); another user needs --allow-other too' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l gid -d 'Group of the files (default: the group running rlun)' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l mode -d 'Permission bits of the files, in octal (write bits are dropped for read-only LUNs). The kernel enforces them (default_permissions)' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l fuse-threads -d 'Threads reading requests from /dev/fuse' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l writeback-cache -d 'The kernel\'s write-back cache for buffered writes: write(2) completes in the page cache; close, fsync and unmount write the data to the LUN (see below). Not with --direct-io' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l log-file -d 'With --daemon: append log messages to this file (default: discarded)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l initiator-name -d 'Our iSCSI name (default: RLUN_INITIATOR_NAME, else the config file\'s initiator_name, else the InitiatorName= of open-iscsi\'s /etc/iscsi/initiatorname.iscsi, else iqn.2026-11.org.rlun:<hostname>)' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l chap-user -d 'CHAP user name (the secret comes from RLUN_CHAP_SECRET, --chap-file or the config)' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l chap-file -d 'File with CHAP credentials (TOML: user, secret, mutual_user, mutual_secret)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l connect-timeout -d 'Give up connecting after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l login-timeout -d 'Give up logging in after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l replacement-timeout -d 'When the connection is lost, keep logging in again until I/O has waited this long without any command completing, then fail pending and new I/O (a login alone does not count; 0 disables reconnecting)' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU (MaxRecvDataSegmentLength we declare, 512 to 16M-1)' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l command-timeout -d 'Abort and retry a SCSI command that has no answer after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l cache -d 'rlun\'s own cache of LUN data. Default: for mount none (the kernel page cache already caches), write-through with --direct-io; for serve and attach write-through (shared by every connection; it wins for 4 KiB random and hot re-reads, and reads of 128 KiB or more streamed with several in flight, as nbdcopy does, bypass it); for bench no cache at all (I/O goes straight to the LUN)' -r -f -a "none\t'Through LunDevice, but every I/O goes to the target'
write-through\t'Reads cached; writes complete when the target has them'
write-back\t'Writes complete in memory and are written back later'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l cache-size -d 'Memory cap of rlun\'s cache for the whole process: every LUN the command opens shares it (a mount of a target with 16 LUNs uses at most this much in all, not 16 times it). 7/8 of it (at least SIZE minus 256M) holds cache pages, reserved once as one region when the command starts and, over iSER, registered with the RDMA device once per connection; the rest bounds the cache\'s reads and write-backs in flight. Unused with --cache none' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l readahead -d 'Read ahead of sequential streams in rlun\'s cache; mount also raises the kernel\'s read-ahead window to 8 MiB (when rlun may write /sys/class/bdi). Off: no read-ahead at all' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l writeback-delay -d 'Longest time written data waits in memory with --cache write-back before it is written back' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l stats-interval -d 'Log each LUN\'s cache counters (hits, misses, read-ahead hits, evictions, dirty bytes, flushes) at this interval, at info level' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l allow-other -d 'Let other users (and root) use the mount; non-root users need user_allow_other in /etc/fuse.conf'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s r -l read-only -d 'Refuse writes to every LUN'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l direct-io -d 'Bypass the kernel page cache (see below)'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l no-auto-unmount -d 'Do not ask fusermount3 to unmount when rlun dies (by default a killed rlun leaves no dead mount behind)'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s d -l daemon -d 'Detach once ready (exit 0), or report why it failed. Gives up when not ready within the connect and login timeouts plus 10 s'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -l timeout -d 'Longest wait for the rlun process to finish' -r
complete -c rlun -n "__fish_rlun_using_subcommand umount" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand umount" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s l -l lazy -d 'Detach even while files are open (lazy unmount); rlun serves them until they are closed, then exits. umount waits for that up to --timeout and fails, saying so, while files are still open'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l socket -d 'Listen on this Unix socket (created with mode 0600; a stale socket file is replaced, a live one refused)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l listen -d 'Listen on this TCP address, e.g. 127.0.0.1:10809 or [::1]:10809' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l tls-cert -d 'TLS certificate chain (PEM): clients must use TLS (NBD_OPT_STARTTLS)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l tls-key -d 'TLS private key (PEM) of --tls-cert' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l tls-ca -d 'Require client certificates signed by these CAs (PEM)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l log-file -d 'With --daemon: append log messages to this file (default: discarded)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l initiator-name -d 'Our iSCSI name (default: RLUN_INITIATOR_NAME, else the config file\'s initiator_name, else the InitiatorName= of open-iscsi\'s /etc/iscsi/initiatorname.iscsi, else iqn.2026-11.org.rlun:<hostname>)' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l chap-user -d 'CHAP user name (the secret comes from RLUN_CHAP_SECRET, --chap-file or the config)' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l chap-file -d 'File with CHAP credentials (TOML: user, secret, mutual_user, mutual_secret)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l connect-timeout -d 'Give up connecting after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l login-timeout -d 'Give up logging in after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l replacement-timeout -d 'When the connection is lost, keep logging in again until I/O has waited this long without any command completing, then fail pending and new I/O (a login alone does not count; 0 disables reconnecting)' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU (MaxRecvDataSegmentLength we declare, 512 to 16M-1)' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l command-timeout -d 'Abort and retry a SCSI command that has no answer after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l cache -d 'rlun\'s own cache of LUN data. Default: for mount none (the kernel page cache already caches), write-through with --direct-io; for serve and attach write-through (shared by every connection; it wins for 4 KiB random and hot re-reads, and reads of 128 KiB or more streamed with several in flight, as nbdcopy does, bypass it); for bench no cache at all (I/O goes straight to the LUN)' -r -f -a "none\t'Through LunDevice, but every I/O goes to the target'
write-through\t'Reads cached; writes complete when the target has them'
write-back\t'Writes complete in memory and are written back later'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l cache-size -d 'Memory cap of rlun\'s cache for the whole process: every LUN the command opens shares it (a mount of a target with 16 LUNs uses at most this much in all, not 16 times it). 7/8 of it (at least SIZE minus 256M) holds cache pages, reserved once as one region when the command starts and, over iSER, registered with the RDMA device once per connection; the rest bounds the cache\'s reads and write-backs in flight. Unused with --cache none' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l readahead -d 'Read ahead of sequential streams in rlun\'s cache; mount also raises the kernel\'s read-ahead window to 8 MiB (when rlun may write /sys/class/bdi). Off: no read-ahead at all' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l writeback-delay -d 'Longest time written data waits in memory with --cache write-back before it is written back' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l stats-interval -d 'Log each LUN\'s cache counters (hits, misses, read-ahead hits, evictions, dirty bytes, flushes) at this interval, at info level' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s r -l read-only -d 'Refuse writes to every export'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l allow-insecure -d 'Allow --listen on a non-loopback address without TLS'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s d -l daemon -d 'Detach once ready (exit 0), or report why it failed. Gives up when not ready within the connect and login timeouts plus 10 s'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l connections -d 'Sockets between rlun and the kernel (multi-conn): the kernel spreads requests over them' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l io-timeout -d 'How long the kernel lets a request or a dead connection wait before it fails I/O with EIO on its own. The default, --replacement-timeout (at least 30 s) plus 30 s, keeps an iSCSI reconnect from ever surfacing as an I/O error; a shorter one fails I/O sooner when rlun is killed, at the risk of errors during a long reconnect' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l log-file -d 'With --daemon: append log messages to this file (default: discarded)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l initiator-name -d 'Our iSCSI name (default: RLUN_INITIATOR_NAME, else the config file\'s initiator_name, else the InitiatorName= of open-iscsi\'s /etc/iscsi/initiatorname.iscsi, else iqn.2026-11.org.rlun:<hostname>)' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l chap-user -d 'CHAP user name (the secret comes from RLUN_CHAP_SECRET, --chap-file or the config)' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l chap-file -d 'File with CHAP credentials (TOML: user, secret, mutual_user, mutual_secret)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l connect-timeout -d 'Give up connecting after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l login-timeout -d 'Give up logging in after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l replacement-timeout -d 'When the connection is lost, keep logging in again until I/O has waited this long without any command completing, then fail pending and new I/O (a login alone does not count; 0 disables reconnecting)' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU (MaxRecvDataSegmentLength we declare, 512 to 16M-1)' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l command-timeout -d 'Abort and retry a SCSI command that has no answer after this long' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l cache -d 'rlun\'s own cache of LUN data. Default: for mount none (the kernel page cache already caches), write-through with --direct-io; for serve and attach write-through (shared by every connection; it wins for 4 KiB random and hot re-reads, and reads of 128 KiB or more streamed with several in flight, as nbdcopy does, bypass it); for bench no cache at all (I/O goes straight to the LUN)' -r -f -a "none\t'Through LunDevice, but every I/O goes to the target'
write-through\t'Reads cached; writes complete when the target has them'
write-back\t'Writes complete in memory and are written back later'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l cache-size -d 'Memory cap of rlun\'s cache for the whole process: every LUN the command opens shares it (a mount of a target with 16 LUNs uses at most this much in all, not 16 times it). 7/8 of it (at least SIZE minus 256M) holds cache pages, reserved once as one region when the command starts and, over iSER, registered with the RDMA device once per connection; the rest bounds the cache\'s reads and write-backs in flight. Unused with --cache none' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l readahead -d 'Read ahead of sequential streams in rlun\'s cache; mount also raises the kernel\'s read-ahead window to 8 MiB (when rlun may write /sys/class/bdi). Off: no read-ahead at all' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l writeback-delay -d 'Longest time written data waits in memory with --cache write-back before it is written back' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l stats-interval -d 'Log each LUN\'s cache counters (hits, misses, read-ahead hits, evictions, dirty bytes, flushes) at this interval, at info level' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s r -l read-only -d 'Attach the device read-only'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s d -l daemon -d 'Detach once ready (exit 0), or report why it failed. Gives up when not ready within the connect and login timeouts plus 10 s'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand detach" -l timeout -d 'Longest wait for the rlun process to finish' -r
complete -c rlun -n "__fish_rlun_using_subcommand detach" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand detach" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand detach" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand detach" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand detach" -s h -l help -d 'Print help'
complete -c rlun -n "__fish_rlun_using_subcommand detach" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand list" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand list" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand list" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand list" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand list" -s h -l help -d 'Print help'
complete -c rlun -n "__fish_rlun_using_subcommand list" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand completions" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand completions" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand completions" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand completions" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand completions" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -l threads -d 'Worker threads of the async runtime. 1 (the default) runs each session\'s whole hot path on one thread: completing an I/O wakes no other thread, which gives the least CPU per I/O and, with one or a few LUNs, the most throughput (see benches/compare.sh). Raise it only when one process serves many busy LUNs (`rlun serve`/`mount` of several) and a single core is the limit. Blocking work (file I/O of `rlun cp`) runs in a separate pool whatever this says' -r
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -l config -d 'Configuration file (named targets, CHAP, defaults)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace). RUST_LOG overrides'
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -s h -l help -d 'Print help'
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "discover" -d 'List the targets a portal offers (SendTargets discovery)'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "ls" -d 'List LUNs with size, block size, vendor and product'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "info" -d 'Show everything about one LUN: inquiry, capacity, VPD limits and the negotiated session parameters'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "cp" -d 'Copy a whole LUN to a file, a file to a LUN, or a LUN to a LUN'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "bench" -d 'Measure a LUN: IOPS, MB/s, latency percentiles and CPU time'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "mount" -d 'Mount a target\'s LUNs as files (FUSE): `lun<N>` for each disk LUN'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "umount" -d 'Unmount an rlun mount and wait until its rlun process has written back cached data and logged out'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "serve" -d 'Serve a target\'s LUNs to NBD clients: `lun<N>` for each disk LUN'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "attach" -d 'Attach one LUN as a kernel block device /dev/nbdN (needs root and the nbd module)'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "detach" -d 'Detach a device attached by `rlun attach`: fsync the device (what the kernel buffers for it is written to the target), then the owning rlun fsyncs it again, disconnects it, writes back and logs out; fails if written data did not reach the target. A device left connected by an rlun that was killed is disconnected directly'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "list" -d 'List what this user\'s rlun processes have mounted, served and attached: one line each, kind (mounted, served, attached), mount point / socket or address / device, and pid'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "completions" -d 'Print a shell completion script (bash, zsh or fish) to standard output'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "generate-man" -d 'Write the man pages into a directory'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach list completions generate-man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
