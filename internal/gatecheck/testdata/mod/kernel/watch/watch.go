package watch

func TrapCost(n int) int { return n }
