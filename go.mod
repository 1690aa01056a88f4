module github.com/apogeemq/apogee

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.1.2
	github.com/klauspost/compress v1.20.4
	github.com/spf13/pflag v1.1.0
	golang.org/x/sys v0.50.0
)

require go.yaml.in/yaml/v3 v3.0.6
