workload latin {
  doc "café"
  session s { user "x"; reply 4 }
}
