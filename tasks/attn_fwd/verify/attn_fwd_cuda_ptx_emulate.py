"""CPU emulation of tasks/attn_fwd/solutions/cuda_ptx_hopper.cu (issue 7), for checking its index arithmetic
without a GPU. It models, by hand-written rules (NOT the hardware): TMA box writes with the 128-byte swizzle
(16-byte chunk ^= row % 8), wgmma descriptor reads for K-major and MN-major 128B-swizzled operands (CUTLASS
canonical layouts: K-major ((8,m),(64,k)) with SBO = 1024; MN-major ((64,n-blocks),(8,k-groups)) with
LBO = n-block distance, SBO = 1024), the m64nNk16 accumulator and register-A fragment maps of the PTX ISA,
and the consumer's per-thread softmax / packing / epilogue transliterated from the kernel.
A pass shows the kernel's index arithmetic agrees with those rules; it cannot show the rules are the hardware's.

    python3 tasks/attn_fwd/verify/attn_fwd_cuda_ptx_emulate.py     # ~2 minutes on one core
"""
import numpy as np, math
BM=BN=128; CHUNK=BM*128
def bf16(x):
    x=np.asarray(x,np.float32); u=x.view(np.uint32).astype(np.uint64)
    u=((u+0x7FFF+((u>>16)&1))>>16)<<16
    return u.astype(np.uint32).view(np.float32)
def swz(addr): return addr ^ (((addr>>7)&7)<<4)
class Smem:
    def __init__(s,n): s.m=np.zeros(n//2,np.float32)
    def tma(s,base,src,r0,c0,rows,S,D):  # box {64, rows}, zero-fill OOB, per-head tensor src [S,D]
        for r in range(rows):
            for c in range(64):
                gr,gc=r0+r,c0+c
                v=src[gr,gc] if (gr<S and gc<D) else 0.0
                s.m[swz(base+r*128+c*2)//2]=v
    def kmajor(s,start,R):   # operand [R rows, 16 k]
        out=np.zeros((R,16),np.float32)
        for r in range(R):
            for k in range(16):
                out[r,k]=s.m[swz(start+(r//8)*1024+(r%8)*128+k*2)//2]
        return out
    def mnmajor(s,start,N,LBO):  # operand B [16 k, N n]
        out=np.zeros((16,N),np.float32)
        for k in range(16):
            for n in range(N):
                out[k,n]=s.m[swz(start+(n//64)*LBO+(k//8)*1024+(k%8)*128+(n%64)*2)//2]
        return out
def acc_rc(t,i): return 16*(t//32)+(t%32)//4+8*((i//2)%2), 8*(i//4)+2*(t%4)+(i%2)
def to_regs(M):  # matrix [64,N] -> regs[128][N/2]
    N=M.shape[1]; R=np.zeros((128,N//2),np.float32)
    for t in range(128):
        for i in range(N//2):
            r,c=acc_rc(t,i); R[t,i]=M[r,c]
    return R
def from_regs(R):
    N=R.shape[1]*2; M=np.zeros((64,N),np.float32)
    for t in range(128):
        for i in range(N//2):
            r,c=acc_rc(t,i); M[r,c]=R[t,i]
    return M
def afrag_matrix(pf,kk):  # pf[128][32][2] (lo,hi) -> A [64,16] of k-step kk, per PTX A fragment map
    A=np.zeros((64,16),np.float32)
    for t in range(128):
        w,g,q=t//32,(t%32)//4,t%4
        regs=pf[t][4*kk:4*kk+4]
        pos=[(g,2*q),(g+8,2*q),(g,2*q+8),(g+8,2*q+8)]
        for rr,(row,col) in enumerate(pos):
            A[16*w+row,col]=regs[rr][0]; A[16*w+row,col+1]=regs[rr][1]
    return A
def run(B,H,HKV,S,D,causal,seed=0):
    rng=np.random.default_rng(seed)
    Q=bf16(rng.standard_normal((B,H,S,D))); K=bf16(rng.standard_normal((B,HKV,S,D))); V=bf16(rng.standard_normal((B,HKV,S,D)))
    DP=64 if D<=64 else 128; CH=DP//64
    O=np.full((B,H,S,D),np.nan,np.float32); LSE=np.full((B,H,S),np.nan,np.float32)
    sl2=1.4426950408889634/math.sqrt(D)
    mtiles=(S+BM-1)//BM
    for b in range(B):
      for h in range(H):
        kvh=h//(H//HKV)
        for mt in range(mtiles):
          nkb_all=(S+BN-1)//BN; nkb=min(nkb_all,((mt+1)*BM+BN-1)//BN) if causal else nkb_all
          sm=Smem(CH*CHUNK+2*CH*CHUNK)  # Q, one K tile, one V tile (stage ring irrelevant here)
          sq,sk,sv=0,CH*CHUNK,2*CH*CHUNK
          for ch in range(CH): sm.tma(sq+ch*CHUNK,Q[b,h],mt*BM,64*ch,BM,S,D)
          for c in range(2):
            oacc=np.zeros((128,DP//2),np.float32); m0=np.full(128,-np.inf,np.float32); m1=m0.copy(); l0=np.zeros(128,np.float32); l1=l0.copy()
            q_addr=sq+c*64*128
            pf=None
            for j in range(nkb):
              for ch in range(CH):
                  sm.tma(sk+ch*CHUNK,K[b,kvh],j*BN,64*ch,BN,S,D); sm.tma(sv+ch*CHUNK,V[b,kvh],j*BN,64*ch,BN,S,D)
              # S = Q K^T via descriptors
              Sm=np.zeros((64,BN),np.float32)
              for kk in range(DP//16):
                  A=sm.kmajor(q_addr+(kk//4)*CHUNK+(kk%4)*32,64); Bk=sm.kmajor(sk+(kk//4)*CHUNK+(kk%4)*32,BN)
                  Sm+=A@Bk.T
              sacc=to_regs(Sm)
              # softmax per thread (transliteration of the kernel)
              for t in range(128):
                  w,lane=t//32,t%32; g,qd=lane//4,lane%4
                  r0=mt*BM+c*64+w*16+g
                  if j==nkb-1:
                      for i in range(BN//2):
                          key=j*BN+8*(i//4)+2*qd+(i%2); row=r0+8*((i//2)%2)
                          if key>=S or (causal and key>row): sacc[t,i]=-np.inf
              mx0=np.array([max(sacc[t,i] for i in range(0,BN//2) if (i//2)%2==0) for t in range(128)],np.float32)
              mx1=np.array([max(sacc[t,i] for i in range(0,BN//2) if (i//2)%2==1) for t in range(128)],np.float32)
              for x in (mx0,mx1):  # quad shuffles
                  for d in (1,2):
                      x[:]=np.maximum(x,x[np.arange(128)^d])
              mn0=np.maximum(m0,mx0*sl2); mn1=np.maximum(m1,mx1*sl2)
              ms0=np.where(mn0==-np.inf,0,mn0); ms1=np.where(mn1==-np.inf,0,mn1)
              a0=np.exp2(m0-ms0); a1=np.exp2(m1-ms1); m0,m1=mn0,mn1
              rowsel=np.array([(i//2)%2 for i in range(BN//2)])
              ms=np.where(rowsel[None,:]==0,ms0[:,None],ms1[:,None])
              sacc=np.exp2(sacc*sl2-ms).astype(np.float32)
              l0=l0*a0+sacc[:,rowsel==0].sum(1); l1=l1*a1+sacc[:,rowsel==1].sum(1)
              # O rescale happens after P_{j-1} V_{j-1}: equivalent order here: apply PV of previous P first
              if pf is not None:
                  oacc=pv(sv_prev,oacc,pf,None,DP)
                  sel=np.array([(i//2)%2 for i in range(DP//2)])
                  oacc=oacc*np.where(sel[None,:]==0,a0[:,None],a1[:,None])
              pf=[[(bf16(sacc[t,2*n]),bf16(sacc[t,2*n+1])) for n in range(BN//4)] for t in range(128)]
              # V of block j is needed by the next step: keep a copy of the smem V tile
              sv_prev=Smem(0); sv_prev.m=sm.m.copy()
            oacc=pv(sv_prev,oacc,pf,None,DP)
            for d in (1,2): l0=l0+l0[np.arange(128)^d]; l1=l1+l1[np.arange(128)^d]
            for t in range(128):
                w,lane=t//32,t%32; g,qd=lane//4,lane%4
                r0=mt*BM+c*64+w*16+g
                for n in range(DP//8):
                    col=8*n+2*qd
                    if col<D:
                        if r0<S: O[b,h,r0,col:col+2]=oacc[t,4*n:4*n+2]/l0[t]
                        if r0+8<S: O[b,h,r0+8,col:col+2]=oacc[t,4*n+2:4*n+4]/l1[t]
                if qd==0:
                    if r0<S: LSE[b,h,r0]=(m0[t]+np.log2(l0[t]))*math.log(2)
                    if r0+8<S: LSE[b,h,r0+8]=(m1[t]+np.log2(l1[t]))*math.log(2)
    # reference
    G=H//HKV; err_o=0; err_l=0
    for b in range(B):
        for h in range(H):
            s=(Q[b,h].astype(np.float64)@K[b,h//G].T.astype(np.float64))/math.sqrt(D)
            if causal: s=np.where(np.triu(np.ones((S,S),bool),1),-np.inf,s)
            mx=s.max(1,keepdims=True); p=np.exp(s-mx); l=p.sum(1,keepdims=True)
            o=(p/l)@V[b,h//G].astype(np.float64); lse=(mx+np.log(l))[:,0]
            err_o=max(err_o,np.nanmax(np.abs(O[b,h]-o)) if not np.isnan(O[b,h]).any() else np.inf)
            err_l=max(err_l,np.abs(LSE[b,h]-lse).max() if not np.isnan(LSE[b,h]).any() else np.inf)
    return err_o,err_l
def pv(sm,oacc,pf,_,DP):
    Om=from_regs(oacc)
    sv=2*(DP//64)*CHUNK
    for kk in range(BN//16):
        A=afrag_matrix(pf,kk); Bv=sm.mnmajor(sv+kk*2048,DP,CHUNK)
        Om+=A@Bv
    return to_regs(Om)
if __name__=="__main__":
    for args in [(1,2,1,200,96,False),(1,2,1,200,96,True),(1,1,1,130,64,True),(1,2,2,70,128,False),(1,1,1,257,128,True),(1,4,2,140,64,False)]:
        print(args, run(*args))
