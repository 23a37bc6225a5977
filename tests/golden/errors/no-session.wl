workload empty {
  doc "declares nothing to send"
}
