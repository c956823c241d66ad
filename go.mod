module github.com/chainsync-go/chainsync

go 1.26.8
