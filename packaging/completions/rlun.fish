# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_rlun_global_optspecs
    string join \n v/verbose q/quiet log-format= threads= config= h/help V/version
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

complete -c rlun -n "__fish_rlun_needs_command" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_needs_command" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_needs_command" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_needs_command" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_needs_command" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_needs_command" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "discover" -d 'List the targets a portal offers (SendTargets discovery)'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "ls" -d 'List LUNs with size, block size, vendor and product'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "info" -d 'Show everything about one LUN'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "cp" -d 'Copy a whole LUN to a file, a file to a LUN, or a LUN to a LUN'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "bench" -d 'Measure a LUN: IOPS, MiB/s, latency percentiles and CPU time'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "mount" -d 'Mount a target\'s LUNs as files (FUSE): `lun<N>` for each disk LUN'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "umount" -d 'Unmount an rlun mount; wait until its rlun has written back'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "serve" -d 'Serve a target\'s LUNs to NBD clients: `lun<N>` for each disk LUN'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "attach" -d 'Attach one LUN as a block device /dev/nbdN or /dev/ublkbN (root; nbd or ublk_drv)'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "detach" -d 'Detach a device attached by `rlun attach`'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "rescan" -d 'Look at the target again: new, removed and resized LUNs'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "stats" -d 'Show what serving rlun processes do: I/O, latency, cache, reconnects'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "list" -d 'List what this user\'s rlun processes have mounted, served, attached'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "paths" -d 'Show the paths of a LUN reached through several portals (multipath)'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "completions" -d 'Print a shell completion script (bash, zsh or fish) to standard output'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "ublk-guard" -d 'Watch a ublk device for its rlun (started by `rlun attach --ublk`): when that rlun dies and no new rlun takes the device over within TIMEOUT seconds, delete the device so that the I/O it holds fails'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "generate-man" -d 'Write the man pages into a directory'
complete -c rlun -n "__fish_rlun_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l initiator-name -d 'Our iSCSI name [default: see --help]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l chap-user -d 'CHAP user name' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l chap-file -d 'File with CHAP credentials (TOML)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l connect-timeout -d 'Give up connecting after this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l login-timeout -d 'Give up logging in after this long [default: 15s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l replacement-timeout -d 'How long I/O waits for a reconnect [default: 120s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU [default: 256k]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l command-timeout -d 'Abort and retry a SCSI command unanswered this long [default: 30s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l portal -d 'Another portal of the target as one more path (multipath)' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l multipath -d 'Also use every portal discovery reports for the target [default: off]' -r -f -a "off\t'The URL\'s portal and those given with --portal (or `portals`)'
auto\t'Also every portal SendTargets discovery reports for the target'"
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l multipath-policy -d 'How I/O is spread over the paths [default: failover]' -r -f -a "failover\t'One path at a time; another only when it fails'
round-robin\t'Every usable path of the best ALUA state in turn'
queue-length\t'The usable path of the best ALUA state with the fewest commands in flight'"
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l failback -d 'Whether failover goes back to the preferred path when it returns [default: immediate]' -r -f -a "immediate\t'As soon as the preferred path is usable again'
manual\t'Only when the path in use fails'"
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l path-check-interval -d 'How often each path is checked (TEST UNIT READY, ALUA states) [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l path-timeout -d 'How long a lost path keeps its commands before they move to another path [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l path-fence -d 'How a write caught on a failed path is kept from landing after its retry [default: path-timeout]' -r -f -a "lun-reset\t'LOGICAL UNIT RESET through a working path, then send it again there at once'
path-timeout\t'Wait out the path timeout, then send it again (dm-multipath\'s way)'"
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand discover" -l json -d 'Print JSON instead of text (fields in rlun-discover(8))'
complete -c rlun -n "__fish_rlun_using_subcommand discover" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand discover" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand discover" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand discover" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l initiator-name -d 'Our iSCSI name [default: see --help]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l chap-user -d 'CHAP user name' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l chap-file -d 'File with CHAP credentials (TOML)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l connect-timeout -d 'Give up connecting after this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l login-timeout -d 'Give up logging in after this long [default: 15s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l replacement-timeout -d 'How long I/O waits for a reconnect [default: 120s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU [default: 256k]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l command-timeout -d 'Abort and retry a SCSI command unanswered this long [default: 30s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l portal -d 'Another portal of the target as one more path (multipath)' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l multipath -d 'Also use every portal discovery reports for the target [default: off]' -r -f -a "off\t'The URL\'s portal and those given with --portal (or `portals`)'
auto\t'Also every portal SendTargets discovery reports for the target'"
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l multipath-policy -d 'How I/O is spread over the paths [default: failover]' -r -f -a "failover\t'One path at a time; another only when it fails'
round-robin\t'Every usable path of the best ALUA state in turn'
queue-length\t'The usable path of the best ALUA state with the fewest commands in flight'"
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l failback -d 'Whether failover goes back to the preferred path when it returns [default: immediate]' -r -f -a "immediate\t'As soon as the preferred path is usable again'
manual\t'Only when the path in use fails'"
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l path-check-interval -d 'How often each path is checked (TEST UNIT READY, ALUA states) [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l path-timeout -d 'How long a lost path keeps its commands before they move to another path [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l path-fence -d 'How a write caught on a failed path is kept from landing after its retry [default: path-timeout]' -r -f -a "lun-reset\t'LOGICAL UNIT RESET through a working path, then send it again there at once'
path-timeout\t'Wait out the path timeout, then send it again (dm-multipath\'s way)'"
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand ls" -l json -d 'Print JSON instead of a table (fields in rlun-ls(8))'
complete -c rlun -n "__fish_rlun_using_subcommand ls" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand ls" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand ls" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand ls" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand info" -l initiator-name -d 'Our iSCSI name [default: see --help]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l chap-user -d 'CHAP user name' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l chap-file -d 'File with CHAP credentials (TOML)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand info" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand info" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand info" -l connect-timeout -d 'Give up connecting after this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l login-timeout -d 'Give up logging in after this long [default: 15s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l replacement-timeout -d 'How long I/O waits for a reconnect [default: 120s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU [default: 256k]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l command-timeout -d 'Abort and retry a SCSI command unanswered this long [default: 30s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l portal -d 'Another portal of the target as one more path (multipath)' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l multipath -d 'Also use every portal discovery reports for the target [default: off]' -r -f -a "off\t'The URL\'s portal and those given with --portal (or `portals`)'
auto\t'Also every portal SendTargets discovery reports for the target'"
complete -c rlun -n "__fish_rlun_using_subcommand info" -l multipath-policy -d 'How I/O is spread over the paths [default: failover]' -r -f -a "failover\t'One path at a time; another only when it fails'
round-robin\t'Every usable path of the best ALUA state in turn'
queue-length\t'The usable path of the best ALUA state with the fewest commands in flight'"
complete -c rlun -n "__fish_rlun_using_subcommand info" -l failback -d 'Whether failover goes back to the preferred path when it returns [default: immediate]' -r -f -a "immediate\t'As soon as the preferred path is usable again'
manual\t'Only when the path in use fails'"
complete -c rlun -n "__fish_rlun_using_subcommand info" -l path-check-interval -d 'How often each path is checked (TEST UNIT READY, ALUA states) [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l path-timeout -d 'How long a lost path keeps its commands before they move to another path [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l path-fence -d 'How a write caught on a failed path is kept from landing after its retry [default: path-timeout]' -r -f -a "lun-reset\t'LOGICAL UNIT RESET through a working path, then send it again there at once'
path-timeout\t'Wait out the path timeout, then send it again (dm-multipath\'s way)'"
complete -c rlun -n "__fish_rlun_using_subcommand info" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand info" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand info" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand info" -l json -d 'Print JSON instead of text'
complete -c rlun -n "__fish_rlun_using_subcommand info" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand info" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand info" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand info" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l bs -d 'Size of each SCSI transfer' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l qd -d 'Transfers kept in flight' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l offset -d 'Start at this byte of both sides (resume a stopped copy)' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l initiator-name -d 'Our iSCSI name [default: see --help]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l chap-user -d 'CHAP user name' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l chap-file -d 'File with CHAP credentials (TOML)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l connect-timeout -d 'Give up connecting after this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l login-timeout -d 'Give up logging in after this long [default: 15s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l replacement-timeout -d 'How long I/O waits for a reconnect [default: 120s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU [default: 256k]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l command-timeout -d 'Abort and retry a SCSI command unanswered this long [default: 30s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l portal -d 'Another portal of the target as one more path (multipath)' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l multipath -d 'Also use every portal discovery reports for the target [default: off]' -r -f -a "off\t'The URL\'s portal and those given with --portal (or `portals`)'
auto\t'Also every portal SendTargets discovery reports for the target'"
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l multipath-policy -d 'How I/O is spread over the paths [default: failover]' -r -f -a "failover\t'One path at a time; another only when it fails'
round-robin\t'Every usable path of the best ALUA state in turn'
queue-length\t'The usable path of the best ALUA state with the fewest commands in flight'"
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l failback -d 'Whether failover goes back to the preferred path when it returns [default: immediate]' -r -f -a "immediate\t'As soon as the preferred path is usable again'
manual\t'Only when the path in use fails'"
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l path-check-interval -d 'How often each path is checked (TEST UNIT READY, ALUA states) [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l path-timeout -d 'How long a lost path keeps its commands before they move to another path [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l path-fence -d 'How a write caught on a failed path is kept from landing after its retry [default: path-timeout]' -r -f -a "lun-reset\t'LOGICAL UNIT RESET through a working path, then send it again there at once'
path-timeout\t'Wait out the path timeout, then send it again (dm-multipath\'s way)'"
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l progress -d 'Show progress also when stderr is no terminal (a line a second)'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l no-progress -d 'Never show progress'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l no-sparse -d 'Write the zeros into a file too (default: leave holes)'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -l fua -d 'Set the FUA bit on writes (write through the target\'s cache)'
complete -c rlun -n "__fish_rlun_using_subcommand cp" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
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
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l initiator-name -d 'Our iSCSI name [default: see --help]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l chap-user -d 'CHAP user name' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l chap-file -d 'File with CHAP credentials (TOML)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l connect-timeout -d 'Give up connecting after this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l login-timeout -d 'Give up logging in after this long [default: 15s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l replacement-timeout -d 'How long I/O waits for a reconnect [default: 120s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU [default: 256k]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l command-timeout -d 'Abort and retry a SCSI command unanswered this long [default: 30s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l portal -d 'Another portal of the target as one more path (multipath)' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l multipath -d 'Also use every portal discovery reports for the target [default: off]' -r -f -a "off\t'The URL\'s portal and those given with --portal (or `portals`)'
auto\t'Also every portal SendTargets discovery reports for the target'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l multipath-policy -d 'How I/O is spread over the paths [default: failover]' -r -f -a "failover\t'One path at a time; another only when it fails'
round-robin\t'Every usable path of the best ALUA state in turn'
queue-length\t'The usable path of the best ALUA state with the fewest commands in flight'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l failback -d 'Whether failover goes back to the preferred path when it returns [default: immediate]' -r -f -a "immediate\t'As soon as the preferred path is usable again'
manual\t'Only when the path in use fails'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l path-check-interval -d 'How often each path is checked (TEST UNIT READY, ALUA states) [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l path-timeout -d 'How long a lost path keeps its commands before they move to another path [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l path-fence -d 'How a write caught on a failed path is kept from landing after its retry [default: path-timeout]' -r -f -a "lun-reset\t'LOGICAL UNIT RESET through a working path, then send it again there at once'
path-timeout\t'Wait out the path timeout, then send it again (dm-multipath\'s way)'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l cache -d 'Cache mode' -r -f -a "none\t'Through LunDevice, but every I/O goes to the target'
write-through\t'Reads cached; writes complete when the target has them'
write-back\t'Writes complete in memory and are written back later'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l cache-size -d 'Memory cap of rlun\'s cache for the whole process [default: 256M]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l readahead -d 'Read ahead of sequential streams [default: on]' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l writeback-delay -d 'Longest wait of data in a write-back cache [default: 1s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l stats-interval -d 'Log cache counters at this interval [default: never]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l json -d 'Print one JSON object instead of text'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -l allow-write -d 'Confirm that a write pattern may overwrite the LUN'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand bench" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l uid -d 'Owner of the files [default: the user running rlun]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l gid -d 'Group of the files [default: the group running rlun]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l mode -d 'Permission bits of the files, in octal' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l fuse-threads -d 'Threads reading requests from /dev/fuse' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l writeback-cache -d 'The kernel\'s write-back cache for buffered writes' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l log-file -d 'With --daemon: append log messages to this file' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l metrics-listen -d 'Serve Prometheus metrics at http://ADDR:PORT/metrics' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l initiator-name -d 'Our iSCSI name [default: see --help]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l chap-user -d 'CHAP user name' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l chap-file -d 'File with CHAP credentials (TOML)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l connect-timeout -d 'Give up connecting after this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l login-timeout -d 'Give up logging in after this long [default: 15s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l replacement-timeout -d 'How long I/O waits for a reconnect [default: 120s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU [default: 256k]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l command-timeout -d 'Abort and retry a SCSI command unanswered this long [default: 30s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l portal -d 'Another portal of the target as one more path (multipath)' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l multipath -d 'Also use every portal discovery reports for the target [default: off]' -r -f -a "off\t'The URL\'s portal and those given with --portal (or `portals`)'
auto\t'Also every portal SendTargets discovery reports for the target'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l multipath-policy -d 'How I/O is spread over the paths [default: failover]' -r -f -a "failover\t'One path at a time; another only when it fails'
round-robin\t'Every usable path of the best ALUA state in turn'
queue-length\t'The usable path of the best ALUA state with the fewest commands in flight'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l failback -d 'Whether failover goes back to the preferred path when it returns [default: immediate]' -r -f -a "immediate\t'As soon as the preferred path is usable again'
manual\t'Only when the path in use fails'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l path-check-interval -d 'How often each path is checked (TEST UNIT READY, ALUA states) [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l path-timeout -d 'How long a lost path keeps its commands before they move to another path [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l path-fence -d 'How a write caught on a failed path is kept from landing after its retry [default: path-timeout]' -r -f -a "lun-reset\t'LOGICAL UNIT RESET through a working path, then send it again there at once'
path-timeout\t'Wait out the path timeout, then send it again (dm-multipath\'s way)'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l cache -d 'Cache mode' -r -f -a "none\t'Through LunDevice, but every I/O goes to the target'
write-through\t'Reads cached; writes complete when the target has them'
write-back\t'Writes complete in memory and are written back later'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l cache-size -d 'Memory cap of rlun\'s cache for the whole process [default: 256M]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l readahead -d 'Read ahead of sequential streams [default: on]' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l writeback-delay -d 'Longest wait of data in a write-back cache [default: 1s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l stats-interval -d 'Log cache counters at this interval [default: never]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l allow-other -d 'Let other users (and root) use the mount'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s r -l read-only -d 'Refuse writes to every LUN'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l direct-io -d 'Bypass the kernel page cache'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l no-auto-unmount -d 'Do not unmount when rlun dies'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s d -l daemon -d 'Detach once ready (exit 0), or report why it failed'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -l metrics-allow-remote -d 'Let --metrics-listen use an address other hosts can reach'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand mount" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -l timeout -d 'Longest wait for the rlun process to finish' -r
complete -c rlun -n "__fish_rlun_using_subcommand umount" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand umount" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand umount" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s l -l lazy -d 'Detach even while files are open (lazy unmount); rlun serves them until they are closed, then exits. umount waits for that up to --timeout and fails, saying so, while files are still open'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand umount" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l socket -d 'Listen on this Unix socket (created with mode 0600)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l listen -d 'Listen on this TCP address, e.g. 127.0.0.1:10809 or [::1]:10809' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l tls-cert -d 'TLS certificate chain (PEM): clients must use TLS' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l tls-key -d 'TLS private key (PEM) of --tls-cert' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l tls-ca -d 'Require client certificates signed by these CAs (PEM)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l log-file -d 'With --daemon: append log messages to this file' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l metrics-listen -d 'Serve Prometheus metrics at http://ADDR:PORT/metrics' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l initiator-name -d 'Our iSCSI name [default: see --help]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l chap-user -d 'CHAP user name' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l chap-file -d 'File with CHAP credentials (TOML)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l connect-timeout -d 'Give up connecting after this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l login-timeout -d 'Give up logging in after this long [default: 15s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l replacement-timeout -d 'How long I/O waits for a reconnect [default: 120s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU [default: 256k]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l command-timeout -d 'Abort and retry a SCSI command unanswered this long [default: 30s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l portal -d 'Another portal of the target as one more path (multipath)' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l multipath -d 'Also use every portal discovery reports for the target [default: off]' -r -f -a "off\t'The URL\'s portal and those given with --portal (or `portals`)'
auto\t'Also every portal SendTargets discovery reports for the target'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l multipath-policy -d 'How I/O is spread over the paths [default: failover]' -r -f -a "failover\t'One path at a time; another only when it fails'
round-robin\t'Every usable path of the best ALUA state in turn'
queue-length\t'The usable path of the best ALUA state with the fewest commands in flight'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l failback -d 'Whether failover goes back to the preferred path when it returns [default: immediate]' -r -f -a "immediate\t'As soon as the preferred path is usable again'
manual\t'Only when the path in use fails'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l path-check-interval -d 'How often each path is checked (TEST UNIT READY, ALUA states) [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l path-timeout -d 'How long a lost path keeps its commands before they move to another path [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l path-fence -d 'How a write caught on a failed path is kept from landing after its retry [default: path-timeout]' -r -f -a "lun-reset\t'LOGICAL UNIT RESET through a working path, then send it again there at once'
path-timeout\t'Wait out the path timeout, then send it again (dm-multipath\'s way)'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l cache -d 'Cache mode' -r -f -a "none\t'Through LunDevice, but every I/O goes to the target'
write-through\t'Reads cached; writes complete when the target has them'
write-back\t'Writes complete in memory and are written back later'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l cache-size -d 'Memory cap of rlun\'s cache for the whole process [default: 256M]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l readahead -d 'Read ahead of sequential streams [default: on]' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l writeback-delay -d 'Longest wait of data in a write-back cache [default: 1s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l stats-interval -d 'Log cache counters at this interval [default: never]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s r -l read-only -d 'Refuse writes to every export'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l allow-insecure -d 'Allow --listen on a non-loopback address without TLS'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s d -l daemon -d 'Detach once ready (exit 0), or report why it failed'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -l metrics-allow-remote -d 'Let --metrics-listen use an address other hosts can reach'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand serve" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l connections -d 'Sockets between rlun and the kernel' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l io-timeout -d 'How long the kernel waits before it fails I/O with EIO on its own' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l queues -d 'ublk: hardware queues, one thread each [default: one per CPU, at most 4]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l queue-depth -d 'ublk: requests in flight per queue' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l log-file -d 'With --daemon: append log messages to this file' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l metrics-listen -d 'Serve Prometheus metrics at http://ADDR:PORT/metrics' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l initiator-name -d 'Our iSCSI name [default: see --help]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l chap-user -d 'CHAP user name' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l chap-file -d 'File with CHAP credentials (TOML)' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l header-digest -d 'Header digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l data-digest -d 'Data digest' -r -f -a "none\t'No digest'
crc32c\t'Require CRC32C (login fails if the target refuses)'
prefer-crc32c\t'Offer CRC32C, accept None (also spelled `prefer`, as before)'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l connect-timeout -d 'Give up connecting after this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l login-timeout -d 'Give up logging in after this long [default: 15s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l replacement-timeout -d 'How long I/O waits for a reconnect [default: 120s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l nop-interval -d 'Ping the target (NOP-Out) after this much silence [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l nop-timeout -d 'Declare the connection dead when a ping is unanswered this long [default: 10s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l max-recv-segment -d 'Largest data segment the target may send us in one PDU [default: 256k]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l command-timeout -d 'Abort and retry a SCSI command unanswered this long [default: 30s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l portal -d 'Another portal of the target as one more path (multipath)' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l multipath -d 'Also use every portal discovery reports for the target [default: off]' -r -f -a "off\t'The URL\'s portal and those given with --portal (or `portals`)'
auto\t'Also every portal SendTargets discovery reports for the target'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l multipath-policy -d 'How I/O is spread over the paths [default: failover]' -r -f -a "failover\t'One path at a time; another only when it fails'
round-robin\t'Every usable path of the best ALUA state in turn'
queue-length\t'The usable path of the best ALUA state with the fewest commands in flight'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l failback -d 'Whether failover goes back to the preferred path when it returns [default: immediate]' -r -f -a "immediate\t'As soon as the preferred path is usable again'
manual\t'Only when the path in use fails'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l path-check-interval -d 'How often each path is checked (TEST UNIT READY, ALUA states) [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l path-timeout -d 'How long a lost path keeps its commands before they move to another path [default: 5s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l path-fence -d 'How a write caught on a failed path is kept from landing after its retry [default: path-timeout]' -r -f -a "lun-reset\t'LOGICAL UNIT RESET through a working path, then send it again there at once'
path-timeout\t'Wait out the path timeout, then send it again (dm-multipath\'s way)'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l cache -d 'Cache mode' -r -f -a "none\t'Through LunDevice, but every I/O goes to the target'
write-through\t'Reads cached; writes complete when the target has them'
write-back\t'Writes complete in memory and are written back later'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l cache-size -d 'Memory cap of rlun\'s cache for the whole process [default: 256M]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l readahead -d 'Read ahead of sequential streams [default: on]' -r -f -a "on\t''
off\t''"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l writeback-delay -d 'Longest wait of data in a write-back cache [default: 1s]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l stats-interval -d 'Log cache counters at this interval [default: never]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s r -l read-only -d 'Attach the device read-only'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l ublk -d 'Attach through ublk as /dev/ublkbN instead of nbd'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l recover -d 'ublk: take over the named /dev/ublkbN, whose rlun died'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s d -l daemon -d 'Detach once ready (exit 0), or report why it failed'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -l metrics-allow-remote -d 'Let --metrics-listen use an address other hosts can reach'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand attach" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand detach" -l timeout -d 'Longest wait for the rlun process to finish' -r
complete -c rlun -n "__fish_rlun_using_subcommand detach" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand detach" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand detach" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand detach" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand detach" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand detach" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand detach" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand rescan" -l timeout -d 'Longest wait for each rescan' -r
complete -c rlun -n "__fish_rlun_using_subcommand rescan" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand rescan" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand rescan" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand rescan" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand rescan" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand rescan" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand rescan" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand stats" -l watch -d 'Sample again every INTERVAL (1s when not given) until Ctrl-C or q' -r
complete -c rlun -n "__fish_rlun_using_subcommand stats" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand stats" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand stats" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand stats" -l json -d 'Print JSON (one object per sample and line) instead of a table'
complete -c rlun -n "__fish_rlun_using_subcommand stats" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand stats" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand stats" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand stats" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand list" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand list" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand list" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand list" -l json -d 'Print JSON instead of a table (fields in rlun-list(8))'
complete -c rlun -n "__fish_rlun_using_subcommand list" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand list" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand list" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand paths" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand paths" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand paths" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand paths" -l json -d 'Print JSON: per process, per LUN, the policy, failovers and paths'
complete -c rlun -n "__fish_rlun_using_subcommand paths" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand paths" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand paths" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand paths" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand completions" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand completions" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand completions" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand completions" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand completions" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand completions" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand ublk-guard" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand ublk-guard" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand ublk-guard" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand ublk-guard" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand ublk-guard" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand ublk-guard" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand ublk-guard" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -l log-format -d 'How log lines are written: text for people, json for machines, journal for systemd\'s journal' -r -f -a "auto\t'Text, or journal when stderr is systemd\'s journal stream'
text\t'Human-readable lines'
json\t'One JSON object per line'
journal\t'Native journald entries with structured fields'"
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -l threads -d 'Worker threads of the async runtime [default: 1]' -r
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -l config -d 'Configuration file [default: /etc/rlun/rlun.toml]' -r -F
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -s v -l verbose -d 'More logging (-v info, -vv debug, -vvv trace)'
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -s q -l quiet -d 'Only print errors'
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlun -n "__fish_rlun_using_subcommand generate-man" -s V -l version -d 'Print version'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "discover" -d 'List the targets a portal offers (SendTargets discovery)'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "ls" -d 'List LUNs with size, block size, vendor and product'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "info" -d 'Show everything about one LUN'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "cp" -d 'Copy a whole LUN to a file, a file to a LUN, or a LUN to a LUN'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "bench" -d 'Measure a LUN: IOPS, MiB/s, latency percentiles and CPU time'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "mount" -d 'Mount a target\'s LUNs as files (FUSE): `lun<N>` for each disk LUN'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "umount" -d 'Unmount an rlun mount; wait until its rlun has written back'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "serve" -d 'Serve a target\'s LUNs to NBD clients: `lun<N>` for each disk LUN'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "attach" -d 'Attach one LUN as a block device /dev/nbdN or /dev/ublkbN (root; nbd or ublk_drv)'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "detach" -d 'Detach a device attached by `rlun attach`'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "rescan" -d 'Look at the target again: new, removed and resized LUNs'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "stats" -d 'Show what serving rlun processes do: I/O, latency, cache, reconnects'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "list" -d 'List what this user\'s rlun processes have mounted, served, attached'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "paths" -d 'Show the paths of a LUN reached through several portals (multipath)'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "completions" -d 'Print a shell completion script (bash, zsh or fish) to standard output'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "ublk-guard" -d 'Watch a ublk device for its rlun (started by `rlun attach --ublk`): when that rlun dies and no new rlun takes the device over within TIMEOUT seconds, delete the device so that the I/O it holds fails'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "generate-man" -d 'Write the man pages into a directory'
complete -c rlun -n "__fish_rlun_using_subcommand help; and not __fish_seen_subcommand_from discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
