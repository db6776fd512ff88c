module sema-native/bench/go-netloop

go 1.21
