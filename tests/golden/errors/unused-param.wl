workload w {
  params {
    used: int = 1
    spare: int = 2 doc "declared but never referenced"
  }
  session main { user "hi"; reply $used }
}
