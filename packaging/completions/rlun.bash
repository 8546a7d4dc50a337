_rlun() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="rlun"
                ;;
            rlun,attach)
                cmd="rlun__subcmd__attach"
                ;;
            rlun,bench)
                cmd="rlun__subcmd__bench"
                ;;
            rlun,completions)
                cmd="rlun__subcmd__completions"
                ;;
            rlun,cp)
                cmd="rlun__subcmd__cp"
                ;;
            rlun,detach)
                cmd="rlun__subcmd__detach"
                ;;
            rlun,discover)
                cmd="rlun__subcmd__discover"
                ;;
            rlun,generate-man)
                cmd="rlun__subcmd__generate__subcmd__man"
                ;;
            rlun,help)
                cmd="rlun__subcmd__help"
                ;;
            rlun,info)
                cmd="rlun__subcmd__info"
                ;;
            rlun,list)
                cmd="rlun__subcmd__list"
                ;;
            rlun,ls)
                cmd="rlun__subcmd__ls"
                ;;
            rlun,mount)
                cmd="rlun__subcmd__mount"
                ;;
            rlun,paths)
                cmd="rlun__subcmd__paths"
                ;;
            rlun,rescan)
                cmd="rlun__subcmd__rescan"
                ;;
            rlun,serve)
                cmd="rlun__subcmd__serve"
                ;;
            rlun,stats)
                cmd="rlun__subcmd__stats"
                ;;
            rlun,ublk-guard)
                cmd="rlun__subcmd__ublk__subcmd__guard"
                ;;
            rlun,umount)
                cmd="rlun__subcmd__umount"
                ;;
            rlun__subcmd__help,attach)
                cmd="rlun__subcmd__help__subcmd__attach"
                ;;
            rlun__subcmd__help,bench)
                cmd="rlun__subcmd__help__subcmd__bench"
                ;;
            rlun__subcmd__help,completions)
                cmd="rlun__subcmd__help__subcmd__completions"
                ;;
            rlun__subcmd__help,cp)
                cmd="rlun__subcmd__help__subcmd__cp"
                ;;
            rlun__subcmd__help,detach)
                cmd="rlun__subcmd__help__subcmd__detach"
                ;;
            rlun__subcmd__help,discover)
                cmd="rlun__subcmd__help__subcmd__discover"
                ;;
            rlun__subcmd__help,generate-man)
                cmd="rlun__subcmd__help__subcmd__generate__subcmd__man"
                ;;
            rlun__subcmd__help,help)
                cmd="rlun__subcmd__help__subcmd__help"
                ;;
            rlun__subcmd__help,info)
                cmd="rlun__subcmd__help__subcmd__info"
                ;;
            rlun__subcmd__help,list)
                cmd="rlun__subcmd__help__subcmd__list"
                ;;
            rlun__subcmd__help,ls)
                cmd="rlun__subcmd__help__subcmd__ls"
                ;;
            rlun__subcmd__help,mount)
                cmd="rlun__subcmd__help__subcmd__mount"
                ;;
            rlun__subcmd__help,paths)
                cmd="rlun__subcmd__help__subcmd__paths"
                ;;
            rlun__subcmd__help,rescan)
                cmd="rlun__subcmd__help__subcmd__rescan"
                ;;
            rlun__subcmd__help,serve)
                cmd="rlun__subcmd__help__subcmd__serve"
                ;;
            rlun__subcmd__help,stats)
                cmd="rlun__subcmd__help__subcmd__stats"
                ;;
            rlun__subcmd__help,ublk-guard)
                cmd="rlun__subcmd__help__subcmd__ublk__subcmd__guard"
                ;;
            rlun__subcmd__help,umount)
                cmd="rlun__subcmd__help__subcmd__umount"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        rlun)
            opts="-v -q -h -V --verbose --quiet --log-format --threads --config --help --version discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__attach)
            opts="-r -d -v -q -h -V --connections --read-only --io-timeout --ublk --queues --queue-depth --recover --daemon --log-file --metrics-listen --metrics-allow-remote --initiator-name --chap-user --chap-file --header-digest --data-digest --connect-timeout --login-timeout --replacement-timeout --nop-interval --nop-timeout --max-recv-segment --command-timeout --portal --multipath --multipath-policy --failback --path-check-interval --path-timeout --path-fence --cache --cache-size --readahead --writeback-delay --stats-interval --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --connections)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --io-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --queues)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --queue-depth)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --metrics-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --initiator-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --data-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --connect-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --login-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --replacement-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-recv-segment)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --command-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --multipath)
                    COMPREPLY=($(compgen -W "off auto" -- "${cur}"))
                    return 0
                    ;;
                --multipath-policy)
                    COMPREPLY=($(compgen -W "failover round-robin queue-length" -- "${cur}"))
                    return 0
                    ;;
                --failback)
                    COMPREPLY=($(compgen -W "immediate manual" -- "${cur}"))
                    return 0
                    ;;
                --path-check-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-fence)
                    COMPREPLY=($(compgen -W "lun-reset path-timeout" -- "${cur}"))
                    return 0
                    ;;
                --cache)
                    COMPREPLY=($(compgen -W "none write-through write-back" -- "${cur}"))
                    return 0
                    ;;
                --cache-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --readahead)
                    COMPREPLY=($(compgen -W "on off" -- "${cur}"))
                    return 0
                    ;;
                --writeback-delay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stats-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__bench)
            opts="-v -q -h -V --pattern --bs --qd --duration --size --json --allow-write --initiator-name --chap-user --chap-file --header-digest --data-digest --connect-timeout --login-timeout --replacement-timeout --nop-interval --nop-timeout --max-recv-segment --command-timeout --portal --multipath --multipath-policy --failback --path-check-interval --path-timeout --path-fence --cache --cache-size --readahead --writeback-delay --stats-interval --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pattern)
                    COMPREPLY=($(compgen -W "read write randread randwrite" -- "${cur}"))
                    return 0
                    ;;
                --bs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --qd)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --initiator-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --data-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --connect-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --login-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --replacement-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-recv-segment)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --command-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --multipath)
                    COMPREPLY=($(compgen -W "off auto" -- "${cur}"))
                    return 0
                    ;;
                --multipath-policy)
                    COMPREPLY=($(compgen -W "failover round-robin queue-length" -- "${cur}"))
                    return 0
                    ;;
                --failback)
                    COMPREPLY=($(compgen -W "immediate manual" -- "${cur}"))
                    return 0
                    ;;
                --path-check-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-fence)
                    COMPREPLY=($(compgen -W "lun-reset path-timeout" -- "${cur}"))
                    return 0
                    ;;
                --cache)
                    COMPREPLY=($(compgen -W "none write-through write-back" -- "${cur}"))
                    return 0
                    ;;
                --cache-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --readahead)
                    COMPREPLY=($(compgen -W "on off" -- "${cur}"))
                    return 0
                    ;;
                --writeback-delay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stats-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__completions)
            opts="-v -q -h -V --verbose --quiet --log-format --threads --config --help --version bash zsh fish"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__cp)
            opts="-v -q -h -V --bs --qd --progress --no-progress --no-sparse --offset --fua --initiator-name --chap-user --chap-file --header-digest --data-digest --connect-timeout --login-timeout --replacement-timeout --nop-interval --nop-timeout --max-recv-segment --command-timeout --portal --multipath --multipath-policy --failback --path-check-interval --path-timeout --path-fence --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --bs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --qd)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --offset)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --initiator-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --data-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --connect-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --login-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --replacement-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-recv-segment)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --command-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --multipath)
                    COMPREPLY=($(compgen -W "off auto" -- "${cur}"))
                    return 0
                    ;;
                --multipath-policy)
                    COMPREPLY=($(compgen -W "failover round-robin queue-length" -- "${cur}"))
                    return 0
                    ;;
                --failback)
                    COMPREPLY=($(compgen -W "immediate manual" -- "${cur}"))
                    return 0
                    ;;
                --path-check-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-fence)
                    COMPREPLY=($(compgen -W "lun-reset path-timeout" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__detach)
            opts="-v -q -h -V --timeout --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__discover)
            opts="-v -q -h -V --json --initiator-name --chap-user --chap-file --header-digest --data-digest --connect-timeout --login-timeout --replacement-timeout --nop-interval --nop-timeout --max-recv-segment --command-timeout --portal --multipath --multipath-policy --failback --path-check-interval --path-timeout --path-fence --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --initiator-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --data-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --connect-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --login-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --replacement-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-recv-segment)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --command-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --multipath)
                    COMPREPLY=($(compgen -W "off auto" -- "${cur}"))
                    return 0
                    ;;
                --multipath-policy)
                    COMPREPLY=($(compgen -W "failover round-robin queue-length" -- "${cur}"))
                    return 0
                    ;;
                --failback)
                    COMPREPLY=($(compgen -W "immediate manual" -- "${cur}"))
                    return 0
                    ;;
                --path-check-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-fence)
                    COMPREPLY=($(compgen -W "lun-reset path-timeout" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__generate__subcmd__man)
            opts="-v -q -h -V --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help)
            opts="discover ls info cp bench mount umount serve attach detach rescan stats list paths completions ublk-guard generate-man help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__attach)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__bench)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__completions)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__cp)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__detach)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__discover)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__generate__subcmd__man)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__info)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__ls)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__mount)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__paths)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__rescan)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__serve)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__stats)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__ublk__subcmd__guard)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__help__subcmd__umount)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__info)
            opts="-v -q -h -V --json --initiator-name --chap-user --chap-file --header-digest --data-digest --connect-timeout --login-timeout --replacement-timeout --nop-interval --nop-timeout --max-recv-segment --command-timeout --portal --multipath --multipath-policy --failback --path-check-interval --path-timeout --path-fence --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --initiator-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --data-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --connect-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --login-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --replacement-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-recv-segment)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --command-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --multipath)
                    COMPREPLY=($(compgen -W "off auto" -- "${cur}"))
                    return 0
                    ;;
                --multipath-policy)
                    COMPREPLY=($(compgen -W "failover round-robin queue-length" -- "${cur}"))
                    return 0
                    ;;
                --failback)
                    COMPREPLY=($(compgen -W "immediate manual" -- "${cur}"))
                    return 0
                    ;;
                --path-check-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-fence)
                    COMPREPLY=($(compgen -W "lun-reset path-timeout" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__list)
            opts="-v -q -h -V --json --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__ls)
            opts="-v -q -h -V --json --initiator-name --chap-user --chap-file --header-digest --data-digest --connect-timeout --login-timeout --replacement-timeout --nop-interval --nop-timeout --max-recv-segment --command-timeout --portal --multipath --multipath-policy --failback --path-check-interval --path-timeout --path-fence --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --initiator-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --data-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --connect-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --login-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --replacement-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-recv-segment)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --command-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --multipath)
                    COMPREPLY=($(compgen -W "off auto" -- "${cur}"))
                    return 0
                    ;;
                --multipath-policy)
                    COMPREPLY=($(compgen -W "failover round-robin queue-length" -- "${cur}"))
                    return 0
                    ;;
                --failback)
                    COMPREPLY=($(compgen -W "immediate manual" -- "${cur}"))
                    return 0
                    ;;
                --path-check-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-fence)
                    COMPREPLY=($(compgen -W "lun-reset path-timeout" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__mount)
            opts="-r -d -v -q -h -V --uid --gid --mode --allow-other --read-only --direct-io --no-auto-unmount --fuse-threads --writeback-cache --daemon --log-file --metrics-listen --metrics-allow-remote --initiator-name --chap-user --chap-file --header-digest --data-digest --connect-timeout --login-timeout --replacement-timeout --nop-interval --nop-timeout --max-recv-segment --command-timeout --portal --multipath --multipath-policy --failback --path-check-interval --path-timeout --path-fence --cache --cache-size --readahead --writeback-delay --stats-interval --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --uid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mode)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fuse-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --writeback-cache)
                    COMPREPLY=($(compgen -W "on off" -- "${cur}"))
                    return 0
                    ;;
                --log-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --metrics-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --initiator-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --data-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --connect-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --login-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --replacement-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-recv-segment)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --command-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --multipath)
                    COMPREPLY=($(compgen -W "off auto" -- "${cur}"))
                    return 0
                    ;;
                --multipath-policy)
                    COMPREPLY=($(compgen -W "failover round-robin queue-length" -- "${cur}"))
                    return 0
                    ;;
                --failback)
                    COMPREPLY=($(compgen -W "immediate manual" -- "${cur}"))
                    return 0
                    ;;
                --path-check-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-fence)
                    COMPREPLY=($(compgen -W "lun-reset path-timeout" -- "${cur}"))
                    return 0
                    ;;
                --cache)
                    COMPREPLY=($(compgen -W "none write-through write-back" -- "${cur}"))
                    return 0
                    ;;
                --cache-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --readahead)
                    COMPREPLY=($(compgen -W "on off" -- "${cur}"))
                    return 0
                    ;;
                --writeback-delay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stats-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__paths)
            opts="-v -q -h -V --json --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__rescan)
            opts="-v -q -h -V --timeout --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__serve)
            opts="-r -d -v -q -h -V --socket --listen --read-only --tls-cert --tls-key --tls-ca --allow-insecure --daemon --log-file --metrics-listen --metrics-allow-remote --initiator-name --chap-user --chap-file --header-digest --data-digest --connect-timeout --login-timeout --replacement-timeout --nop-interval --nop-timeout --max-recv-segment --command-timeout --portal --multipath --multipath-policy --failback --path-check-interval --path-timeout --path-fence --cache --cache-size --readahead --writeback-delay --stats-interval --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --metrics-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --initiator-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chap-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --data-digest)
                    COMPREPLY=($(compgen -W "none crc32c prefer-crc32c" -- "${cur}"))
                    return 0
                    ;;
                --connect-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --login-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --replacement-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nop-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-recv-segment)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --command-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --multipath)
                    COMPREPLY=($(compgen -W "off auto" -- "${cur}"))
                    return 0
                    ;;
                --multipath-policy)
                    COMPREPLY=($(compgen -W "failover round-robin queue-length" -- "${cur}"))
                    return 0
                    ;;
                --failback)
                    COMPREPLY=($(compgen -W "immediate manual" -- "${cur}"))
                    return 0
                    ;;
                --path-check-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --path-fence)
                    COMPREPLY=($(compgen -W "lun-reset path-timeout" -- "${cur}"))
                    return 0
                    ;;
                --cache)
                    COMPREPLY=($(compgen -W "none write-through write-back" -- "${cur}"))
                    return 0
                    ;;
                --cache-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --readahead)
                    COMPREPLY=($(compgen -W "on off" -- "${cur}"))
                    return 0
                    ;;
                --writeback-delay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stats-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__stats)
            opts="-v -q -h -V --watch --json --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --watch)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__ublk__subcmd__guard)
            opts="-v -q -h -V --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        rlun__subcmd__umount)
            opts="-l -v -q -h -V --lazy --timeout --verbose --quiet --log-format --threads --config --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "auto text json journal" -- "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _rlun -o nosort -o bashdefault -o default rlun
else
    complete -F _rlun -o bashdefault -o default rlun
fi
