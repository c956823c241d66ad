module github.com/chainsync-go/chainsync/internal/dashboard/browsertest

go 1.26.8

require (
	github.com/chainsync-go/chainsync v0.0.0
	github.com/chromedp/cdproto v0.160.1
	github.com/chromedp/chromedp v0.23.1
)

require github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect

replace github.com/chainsync-go/chainsync => ../../..
