module trainguard.io/entry

// Debian bookworm's golang-go (1.19) builds it: deploy/Dockerfile compiles it in a stage of its own.
go 1.19
