# Sourced by the scripts in scripts/ that build Go binaries from the Go module proxy (scripts/k8s-testcluster,
# scripts/build-promtool). What to build is pinned by a small module of the project's own (scripts/*/go.mod),
# whose go.sum is the trust root. Binaries are built once into a directory named by a key (versions, platform,
# recipe, a hash of the pins) and reused while that directory is complete.
#
# The sourcing script defines say and die (its own progress prefix) and sets build_jobs (go build -p).

# The version that a go.mod requires of a module (not the replace lines, not the tool lines).
required_version() { awk -v m="$2" '$1 == m && $2 ~ /^v[0-9]/ { print $2; exit }' "$1"; }

# The go command, on PATH or where Go's release archive installs it. $1: the go.mod that says which version.
find_go() {
    if command -v go >/dev/null; then
        command -v go
    elif [[ -x /usr/local/go/bin/go ]]; then
        echo /usr/local/go/bin/go
    else
        die "Go is needed to build these binaries once (see $1 for the version)"
    fi
}

# Builds into directory $1 once: nothing if it is complete; otherwise, holding lock file $2 (a second caller
# waits for the first, then finds the result), runs command $3... with a fresh partial directory as its last
# argument, and moves that into place in one step, so that nobody ever sees half a build. The lock stays held
# on file descriptor 9 until the script exits: what it starts to outlive it should be given 9>&-.
build_once() {
    local dir="$1" lock="$2" partial
    shift 2
    [[ -f "$dir/.complete" ]] && return
    mkdir -p "$(dirname "$dir")"
    exec 9>"$lock"
    flock -n 9 || {
        say "waiting for another build of the same binaries to finish"
        flock 9
    }
    [[ -f "$dir/.complete" ]] && return # another caller built it while we waited
    partial="$(dirname "$dir")/.partial-$(basename "$dir")"
    rm -rf "$partial"
    mkdir -p "$partial"
    "$@" "$partial"
    touch "$partial/.complete"
    rm -rf "$dir"
    mv "$partial" "$dir"
}

# The environment of a build: the go command in $go, Go's caches under $1, no cgo, the pins as they are.
go_env() {
    go="$(find_go "$2")"
    export GOMODCACHE="$1/go/mod" GOCACHE="$1/go/build" CGO_ENABLED=0
    # -modcacherw: the cache can be removed with rm -rf; -mod=readonly: go.sum is the trust root.
    export GOFLAGS="-mod=readonly -modcacherw -trimpath -buildvcs=false"
}

# go build, gently: lowest priority and $build_jobs packages at a time; says how long it took.
go_build() {
    local dir="$1" out="$2" pkg="$3" ldflags="$4" started=$SECONDS
    say "building $(basename "$out") ($pkg)"
    (cd "$dir" && nice -n 19 "$go" build -p "$build_jobs" -ldflags "-s -w $ldflags" -o "$out" "$pkg")
    say "built $(basename "$out") in $((SECONDS - started))s"
}

# Several programs of one module in one go build, into directory $2, each named by its package's last element:
# the build plans them together, so that one program's link overlaps the others' compiling (one after the other,
# a cold build of Kubernetes' four control-plane programs left a core idle through each link). $3: the -X flags
# (one set for all), then the packages.
go_build_together() {
    local dir="$1" out="$2" ldflags="$3" started=$SECONDS
    shift 3
    local names="${*##*/}"
    say "building $names"
    (cd "$dir" && nice -n 19 "$go" build -p "$build_jobs" -ldflags "-s -w $ldflags" -o "$out/" "$@")
    say "built $names in $((SECONDS - started))s"
}
