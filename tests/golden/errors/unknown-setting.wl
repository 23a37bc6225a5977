workload w {
  concurency = 4
  session main { user "hi"; reply 1 }
}
